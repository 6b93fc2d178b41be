"""Time every benchmark of a problem: the solution and eager PyTorch side by side (inside the
worker), and the torch.compile baseline on its own.

For each benchmark shape: draw the inputs, check the solution on them once more, then sample
reference and solution in alternating rounds under the stop rule (harness.timing), each call on
fresh inputs prepared outside the timed region, with random timed calls of the solution checked
too (harness.feeding). Afterwards the solution's calls are timed once more with a wall clock
that waits for the whole device and every thread: a solution whose work the events did not see
(launched on another stream, left to a thread) is rejected as "unseen_work". The row
keeps both sides' raw samples, the paired speedup with its 95% interval, why sampling stopped,
the launch floor, the bytes and FLOPs the problem must move and compute, and the GPU's clock
and temperature over the samples.

On the GPU each row also holds per-call times (harness.measure.percall): every call timed again
from an idle device, its host time included, what a caller that waits for each result pays,
with its own speedup; where the two speedups part by more than 10%, the row names the
host-bound side. Under `--as kernelbench` the device times are KernelBench's
(harness.measure.kernelbench): each side on its own, the mean of 100 calls after a 256 MB fill,
and the speedup is the ratio of the means.

CUDA-graph mode (`graph=True`) captures K calls on K different input sets into one graph and
times replays; K is chosen so that the input sets together exceed twice the L2, so each call
still starts with its inputs out of cache, and launch overhead is gone from the figure.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
from collections.abc import Callable
from typing import Any

import torch

from harness import accuracy, codec, stats, status
from harness.inputs import Seeds, make_inputs, replicate_all
from harness.loading import Case, Problem
from harness.matching import mismatch, tolerance
from harness.measure import calls as calls_
from harness.measure import (
    checking,
    feeding,
    gpustate,
    gradients,
    kernelbench,
    passes,
    percall,
    roofline,
    timing,
)
from harness.measure.checking import (
    Counted,
    Verdict,
    build_models,
    check_once,
    guard,
)
from harness.measure.seen import check_seen
from harness.parts import part
from harness.record import BenchRow
from harness.settings import Settings

LAUNCH_BOUND_FACTOR = 3.0  # a median under this many floors is mostly launch cost
FINAL_CHECKS = 2  # timed-path calls checked after sampling, whatever the dice said


def time_benchmarks(
    problem: Problem,
    model_new: type,
    device: torch.device,
    settings: Settings,
    on_case: Callable[[str], None] = lambda name: None,
    counted: Counted | None = None,
) -> list[BenchRow]:
    """One row per benchmark of `problem` (see the module doc); `on_case` hears each
    benchmark's name as it starts, `counted` (done, total) after each."""
    timer = _timer(device, settings)
    rule = settings.timing.rule
    floor = timing.floor_us(timer, device, rule) if device.type == "cuda" else None
    seeds = Seeds.of(settings.checking)
    rows = []
    for index, bench in enumerate(problem.benchmarks):
        on_case(bench.name)
        seed = seeds.benchmark(index)
        models = build_models(problem, model_new, bench, seed, device)
        inputs = guard(status.PROBLEM_ERROR, "get_inputs", make_inputs, bench, seed, device)
        verdict = check_once(problem, bench, models, inputs, device, settings.checking, seed)
        if verdict:
            raise Verdict(status.INCORRECT, f"benchmark {bench.name!r}: {verdict}")
        with torch.no_grad():
            output = models[0](*replicate_all(inputs, device))
        row: dict[str, Any] = {"name": bench.name, "inputs": describe_inputs(inputs)}
        row.update(roofline.counts(problem, inputs, output))
        calls = {"reference": models[0], "solution": models[1]}
        label = f"benchmark {bench.name!r}"
        checker = _spot_checker(problem, bench, models[0], device, settings, label)
        row.update(_sample(calls, bench, seed, inputs, device, settings, timer, checker))
        rows.append(_floored(row, floor))
        if problem.backward:
            drawn = (seed, inputs, output)
            rows += _pass_rows(problem, bench, models, drawn, device, settings, (timer, floor))
        if counted:
            counted(index + 1, len(problem.benchmarks))
    return [codec.decode(BenchRow, row) for row in rows]


def _pass_rows(
    problem: Problem,
    bench: Case,
    models: tuple[Any, Any],
    drawn: tuple[int, list[Any], Any],
    device: torch.device,
    settings: Settings,
    timed: tuple[timing.Timer, float | None],
) -> list[dict[str, Any]]:
    """The backward and forward+backward rows of one benchmark (harness.measure.passes), after
    its gradients are checked on the benchmark's own inputs."""
    seed, inputs, output = drawn
    timer, floor = timed
    tolerance_ = settings.checking.tolerance
    with part("gradients"):
        verdict = gradients.check(problem, bench, models, inputs, device, tolerance_, seed)
    if verdict:
        raise Verdict(status.INCORRECT, f"benchmark {bench.name!r}: {verdict}")
    params = gradients.comparable_params(*models)
    note = passes.described(passes.backward_by(models[1], replicate_all(inputs, device)))
    rows = []
    for kind in passes.KINDS:
        step = passes.Pass(kind, output, params)
        name = passes.row_name(bench.name, kind)
        check = passes.Training(models[0], step.count, params)
        checker = _spot_checker(problem, bench, check, device, settings, f"benchmark {name!r}")
        calls = {"reference": models[0], "solution": models[1]}
        row: dict[str, Any] = {"name": name, "inputs": describe_inputs(inputs), "backward": kind}
        row.update(_sample(calls, bench, seed, inputs, device, settings, timer, checker, step))
        row["note"] = "; ".join(n for n in (row["note"], note) if n) or None
        rows.append(_floored(row, floor))
    return rows


def _floored(row: dict[str, Any], floor: float | None) -> dict[str, Any]:
    """`row` with the launch floor, and whether its median is mostly launch cost."""
    row["floor_us"] = floor
    solution_us = row["solution"]["median_us"]
    row["launch_bound"] = bool(
        floor and row["mode"] == "cuda_events" and solution_us < LAUNCH_BOUND_FACTOR * floor
    )
    return row


def compile_baseline(
    problem: Problem, device: torch.device, settings: Settings
) -> list[dict[str, Any]]:
    """Eager and torch.compile'd reference, side by side, per benchmark; compile time apart."""
    timer = _timer(device, settings)
    seeds = Seeds.of(settings.checking)
    rows = []
    for index, bench in enumerate(problem.benchmarks):
        seed = seeds.benchmark(index)
        eager, _ = build_models(problem, problem.model, bench, seed, device)
        inputs = guard(status.PROBLEM_ERROR, "get_inputs", make_inputs, bench, seed, device)
        compiled = torch.compile(eager)
        begin = time.perf_counter()
        with torch.no_grad():
            got = guard(status.RUNTIME_ERROR, "torch.compile", compiled, *inputs)
            want = eager(*inputs)
        _synchronize(device)
        compile_s = time.perf_counter() - begin
        calls = {"reference": eager, "compiled": compiled}
        row = {"name": bench.name, "inputs": describe_inputs(inputs), "compile_s": compile_s}
        allowed = tolerance(problem, bench, settings.checking.tolerance)
        row["mismatch"] = mismatch(want, got, allowed, accuracy.Exact(eager, inputs, device))
        row.update(_sample(calls, bench, seed, inputs, device, settings, timer))
        rows.append(row)
        if problem.backward:
            drawn = (seed, inputs, want)
            timed = (device, settings, timer)
            rows += _compiled_passes(problem, bench, (eager, compiled), drawn, timed)
    return rows


def _compiled_passes(
    problem: Problem,
    bench: Case,
    models: tuple[Any, Any],
    drawn: tuple[int, list[Any], Any],
    timed: tuple[torch.device, Settings, timing.Timer],
) -> list[dict[str, Any]]:
    """The compile baseline's backward and forward+backward rows: the compiled reference's
    first backward (its compilation) timed apart, and its gradients compared with eager's."""
    seed, inputs, output = drawn
    device, settings, timer = timed
    eager, compiled = models
    # A compiled backward frees ("donates") buffers it no longer needs unless told not to, and
    # then refuses the retained graph that the backward row runs through again and again.
    torch._functorch.config.donated_buffer = False
    params = passes.param_names(eager)
    first = passes.Pass(passes.BOTH, output, params)
    given = first.extend(inputs, seed)
    begin = time.perf_counter()
    got = guard(status.RUNTIME_ERROR, "torch.compile, backward", first.wrap(compiled, []), *given)
    _synchronize(device)
    compile_s = time.perf_counter() - begin
    training = first.wrap(eager, [])
    exact = accuracy.Exact(training, given, device)
    allowed = tolerance(problem, bench, settings.checking.tolerance)
    differs = mismatch(training(*given), got, allowed, exact)
    rows = []
    for kind in passes.KINDS:
        step = passes.Pass(kind, output, params)
        name = passes.row_name(bench.name, kind)
        row = {"name": name, "inputs": describe_inputs(inputs), "compile_s": compile_s}
        row["mismatch"] = differs
        calls = {"reference": eager, "compiled": compiled}
        row.update(_sample(calls, bench, seed, inputs, device, settings, timer, None, step))
        rows.append(row)
    return rows


def _spot_checker(
    problem: Problem,
    bench: Case,
    reference: Any,
    device: torch.device,
    settings: Settings,
    label: str,
) -> feeding.SpotChecker:
    def criterion(pristine: list[Any]) -> Any:
        return checking.criterion(problem, bench, settings.checking, reference, pristine, device)

    check = feeding.output_check(reference, device, criterion)
    return feeding.SpotChecker(check, device, label)


def _timer(device: torch.device, settings: Settings, graphed: bool = False) -> timing.Timer:
    """The timer for `device`: events with the chosen flush, or for graph replays no flush."""
    if settings.timing.mode(device.type) == "wall_clock":
        return timing.WallTimer()
    if graphed:
        return timing.CudaTimer(device, flush=None, method="cuda_graph")
    return timing.CudaTimer(device, settings.timing.flush)


def _sample(
    models: dict[str, Any],
    bench: Case,
    seed: int,
    inputs: list[Any],
    device: torch.device,
    settings: Settings,
    timer: timing.Timer,
    checker: feeding.SpotChecker | None = None,
    step: passes.Pass | None = None,
) -> dict[str, Any]:
    """Sample `models` side by side with `timer` (a graph timer when the calls are graph
    replays); the row's timing fields. With a `checker`, the solution's timed calls are spot
    checked and its work cross-checked with a wall clock. With a `step`, each call is that
    backward pass of its model, on upstream gradients and inputs (harness.measure.passes)."""
    fed = calls_.make_calls(models, (bench, seed), inputs, device, settings, checker, step)
    calls, per_call, note = fed
    probe = gpustate.open_probe(device) if device.type == "cuda" else None
    if per_call > 1:
        timer = _timer(device, settings, graphed=True)
    after = probe.after if probe else None
    on_gpu = device.type == "cuda" and per_call == 1
    as_kernelbench = on_gpu and settings.checking.profile == kernelbench.PROFILE
    # KernelBench's eval times with autograd on (its checks run under no_grad): so does the
    # profile, which costs a model with parameters some host time recording the graph.
    with part("timing"), contextlib.nullcontext() if as_kernelbench else torch.no_grad():
        if as_kernelbench:
            trials = settings.checking.kernelbench_trials
            sample = functools.partial(kernelbench.sample, trials=trials)
            sampled = guard(status.RUNTIME_ERROR, "timing", sample, calls, device)
        else:
            rule = settings.timing.rule
            sampled = guard(
                status.RUNTIME_ERROR,
                "timing",
                timing.sample,
                calls,
                timer,
                rule,
                time.perf_counter,
                after,
            )
    row: dict[str, Any] = {"mode": _method(sampled), "stop": sampled.stop, "note": note}
    for name, measured in sampled.measurements.items():
        per_model = tuple(t / per_call for t in measured.times_us)
        scaled = dataclasses.replace(measured, times_us=per_model)
        row[name] = codec.encode(scaled)
    first, second = list(models)
    ratio = stats.mean_ratio if as_kernelbench else stats.paired_ratio
    row["speedup"] = codec.encode(ratio(row[first]["times_us"], row[second]["times_us"]))
    row["state"] = probe.summary() if probe else None
    solution = calls.get("solution")
    if checker is not None and isinstance(solution, feeding.Feed):
        row.update(_fed_extras(calls, solution, checker, device, settings, on_gpu, row))
    return row


def _fed_extras(
    calls: dict[str, Any],
    solution: feeding.Feed,
    checker: feeding.SpotChecker,
    device: torch.device,
    settings: Settings,
    on_gpu: bool,
    row: dict[str, Any],
) -> dict[str, Any]:
    """What a row of fed calls gets after its timing: the per-call times (on a GPU), the last
    spot checks, and the wall-clock cross-check for unseen work."""
    extras: dict[str, Any] = {}
    if on_gpu:
        with part("per_call"):
            extras.update(percall.measure(calls, device, settings, row["speedup"]["value"]))
    with part("spot_check"):
        extras["spot_checks"] = _final_checks(solution, checker)
    host = row["solution"].get("host_us")
    extras["wall_us"] = check_seen(solution, row["solution"]["median_us"], host, device)
    return extras


def _method(sampled: timing.Sampled) -> str:
    """The timer the row really got, as its measurements name it."""
    return next(iter(sampled.measurements.values())).method


def _final_checks(feed: feeding.Feed, checker: feeding.SpotChecker) -> int:
    """A few more calls down the timed path, each checked; the number of timed calls checked."""
    with torch.no_grad():
        feed.settle()  # the last sampled call, checked or not as the dice say
        checker.force(FINAL_CHECKS)
        for _ in range(FINAL_CHECKS):
            feed.prepare()
            feed()
        feed.settle()
    return checker.checked


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def describe_inputs(inputs: list[Any]) -> list[str]:
    described = []
    for value in inputs:
        if isinstance(value, torch.Tensor):
            shape = ",".join(str(d) for d in value.shape)
            described.append(f"{str(value.dtype).removeprefix('torch.')}[{shape}]")
        else:
            described.append(repr(value))
    return described
