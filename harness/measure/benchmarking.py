"""Time every benchmark of a problem: the solution and eager PyTorch side by side (inside the
worker). The torch.compile baseline samples the same way (harness.measure.compiled).

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
from dataclasses import dataclass
from typing import Any

import torch

from harness import stats, status
from harness.inputs import Seeds, make_inputs, replicate_all
from harness.loading import Case, Problem
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
from harness.measurement import Measurement, PerCall
from harness.parts import part
from harness.record import BenchRow, GpuState
from harness.settings import Settings
from harness.stats import Interval

LAUNCH_BOUND_FACTOR = 3.0  # a median under this many floors is mostly launch cost
FINAL_CHECKS = 2  # timed-path calls checked after sampling, whatever the dice said


@dataclass(frozen=True)
class SideBySide:
    """Two calls sampled side by side: each side's times per model call (by call name), the
    speedup of the first over the second, the timer they got, why sampling stopped, a note on
    how the calls were fed, and the GPU's state over the samples."""

    mode: str
    stop: str
    note: str | None
    sides: dict[str, Measurement]
    speedup: Interval
    state: GpuState | None


@dataclass(frozen=True)
class Fed:
    """What a row of fed calls gets after its timing (`_fed`)."""

    spot_checks: int  # timed calls whose output was checked
    wall_us: float  # the wall-clock cross-check per call
    per_call: PerCall | None  # on a GPU: each call timed from an idle device
    host_bound: str | None  # the side whose host time the per-call speedup shows


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
    timer = timer_for(device, settings)
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
        bytes_, flops = roofline.counts(problem, inputs, output)
        calls = {"reference": models[0], "solution": models[1]}
        label = f"benchmark {bench.name!r}"
        checker = _spot_checker(problem, bench, models[0], device, settings, label)
        timed = sample(calls, bench, seed, inputs, device, settings, timer, checker)
        row = _row(bench.name, inputs, timed, floor, timed[0].note)
        rows.append(dataclasses.replace(row, bytes=bytes_, flops=flops))
        if problem.backward:
            drawn = (seed, inputs, output)
            rows += _pass_rows(problem, bench, models, drawn, device, settings, (timer, floor))
        if counted:
            counted(index + 1, len(problem.benchmarks))
    return rows


def _pass_rows(
    problem: Problem,
    bench: Case,
    models: tuple[Any, Any],
    drawn: tuple[int, list[Any], Any],
    device: torch.device,
    settings: Settings,
    timed: tuple[timing.Timer, float | None],
) -> list[BenchRow]:
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
    by = passes.described(passes.backward_by(models[1], replicate_all(inputs, device)))
    rows = []
    for kind in passes.KINDS:
        step = passes.Pass(kind, output, params)
        name = passes.row_name(bench.name, kind)
        check = passes.Training(models[0], step.count, params)
        checker = _spot_checker(problem, bench, check, device, settings, f"benchmark {name!r}")
        calls = {"reference": models[0], "solution": models[1]}
        sampled = sample(calls, bench, seed, inputs, device, settings, timer, checker, step)
        note = "; ".join(n for n in (sampled[0].note, by) if n) or None
        rows.append(dataclasses.replace(_row(name, inputs, sampled, floor, note), backward=kind))
    return rows


def _row(
    name: str,
    inputs: list[Any],
    timed: tuple[SideBySide, Fed | None],
    floor: float | None,
    note: str | None,
) -> BenchRow:
    """A benchmark row from its sampling, with the timer's launch floor and whether the
    solution's median is mostly launch cost."""
    sampled, fed = timed
    reference, solution = sampled.sides["reference"], sampled.sides["solution"]
    launch_bound = bool(
        floor and sampled.mode == "cuda_events" and solution.median_us < LAUNCH_BOUND_FACTOR * floor
    )
    return BenchRow(
        name=name,
        inputs=tuple(describe_inputs(inputs)),
        reference=reference,
        solution=solution,
        speedup=sampled.speedup,
        mode=sampled.mode,
        stop=sampled.stop,
        note=note,
        state=sampled.state,
        floor_us=floor,
        launch_bound=launch_bound,
        spot_checks=fed.spot_checks if fed else None,
        wall_us=fed.wall_us if fed else None,
        per_call=fed.per_call if fed else None,
        host_bound=fed.host_bound if fed else None,
    )


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


def timer_for(device: torch.device, settings: Settings, graphed: bool = False) -> timing.Timer:
    """The timer for `device`: events with the chosen flush, or for graph replays no flush."""
    if settings.timing.mode(device.type) == "wall_clock":
        return timing.WallTimer()
    if graphed:
        return timing.CudaTimer(device, flush=None, method="cuda_graph")
    return timing.CudaTimer(device, settings.timing.flush)


def sample(
    models: dict[str, Any],
    bench: Case,
    seed: int,
    inputs: list[Any],
    device: torch.device,
    settings: Settings,
    timer: timing.Timer,
    checker: feeding.SpotChecker | None = None,
    step: passes.Pass | None = None,
) -> tuple[SideBySide, Fed | None]:
    """Sample `models` side by side with `timer` (a graph timer when the calls are graph
    replays). With a `checker`, the solution's timed calls are spot checked and its work
    cross-checked with a wall clock (the Fed part, else None). With a `step`, each call is
    that backward pass of its model, on upstream gradients and inputs (harness.measure.passes)."""
    made = calls_.make_calls(models, (bench, seed), inputs, device, settings, checker, step)
    calls, per_call, note = made
    probe = gpustate.open_probe(device) if device.type == "cuda" else None
    if per_call > 1:
        timer = timer_for(device, settings, graphed=True)
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
    sides = {
        name: dataclasses.replace(measured, times_us=tuple(t / per_call for t in measured.times_us))
        for name, measured in sampled.measurements.items()
    }
    first, second = (sides[name].times_us for name in models)
    ratio = stats.mean_ratio if as_kernelbench else stats.paired_ratio
    state = probe.summary() if probe else None
    side_by_side = SideBySide(
        _method(sampled), sampled.stop, note, sides, ratio(first, second), state
    )
    solution = calls.get("solution")
    if checker is None or not isinstance(solution, feeding.Feed):
        return side_by_side, None
    fed = _fed(calls, solution, checker, (device, settings, on_gpu), side_by_side)
    return side_by_side, fed


def _fed(
    calls: dict[str, Any],
    solution: feeding.Feed,
    checker: feeding.SpotChecker,
    where: tuple[torch.device, Settings, bool],
    sampled: SideBySide,
) -> Fed:
    """What a row of fed calls gets after its timing: the per-call times (on a GPU), the last
    spot checks, and the wall-clock cross-check for unseen work."""
    device, settings, on_gpu = where
    per_call, host_bound = None, None
    if on_gpu:
        with part("per_call"):
            per_call, host_bound = percall.measure(calls, device, settings, sampled.speedup.value)
    with part("spot_check"):
        spot_checks = _final_checks(solution, checker)
    timed = sampled.sides["solution"]
    wall_us = check_seen(solution, timed.median_us, timed.host_us, device)
    return Fed(spot_checks, wall_us, per_call, host_bound)


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


def synchronize(device: torch.device) -> None:
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
