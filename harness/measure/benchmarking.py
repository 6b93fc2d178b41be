"""Time every benchmark of a problem: the solution and eager PyTorch side by side (inside the
worker). The torch.compile baseline samples the same way (harness.measure.compiled).

For each benchmark shape: draw the inputs, check the solution on them once more, then sample
reference and solution in alternating rounds under the stop rule (timing.py), each call on
fresh inputs prepared outside the timed region, with random timed calls of the solution checked
too (harness.measure.feeding). Afterwards the solution's calls are timed once more with a wall clock
that waits for the whole device and every thread: a solution whose work the events did not see
(launched on another stream, left to a thread) is rejected as "unseen_work". The row
keeps both sides' raw samples, the paired speedup with its 95% interval, why sampling stopped,
the launch floor, the bytes and FLOPs the problem must move and compute, and the GPU's clock
and temperature over the samples.

On the GPU each row also holds per-call times (`time_per_call`): every call timed again
from an idle device, its host time included, what a caller that waits for each result pays,
with its own speedup; where the two speedups part by more than 10%, the row names the
host-bound side. Under `--as kernelbench` the device times are KernelBench's
(harness.measure.kernelbench): each side on its own, the mean of 100 calls after a 256 MB fill,
and the speedup is the ratio of the means.

CUDA-graph mode (`graph=True`) captures K calls on K different input sets into one graph and
times replays; K is chosen so that the input sets together exceed twice the L2, so each call
still starts with its inputs out of cache, and launch overhead is gone from the figure.

Per-call times: each call timed from an idle device, its host time included.

The harness's device time hides the host: a sleep kernel keeps the GPU busy while a call is
launched (harness.measure.timing.CudaTimer), so the figure is the kernels' own. A caller that
waits for each result pays the launches too, and a multi-kernel eager reference can spend more
time launching than computing. So every GPU row is timed a second way: the same L2 flush, then
an untimed call on other inputs (`warm_call`: the host's caches then hold the call's code, as
in a loop of calls; amid the harness's own work between calls, a call timed by the host's
clock takes longer: CudaTimer, docs/timing.md), a synchronize, so the device is idle when
the start event is recorded, then the call; the events then span the call's launches and its
kernels. Both sides are sampled side by side under `per_call_rule` (looser than the device
time's: this is the second figure of a row), and the paired speedup is compared with the
device one: where they part by more than HOST_BOUND_GAP, the row names the side whose host
time shows (`host_bound`).

The zero-argument calls the timer samples, one per side: each model fed fresh inputs from
its own copies of a few input sets (harness.measure.feeding), or, in CUDA-graph mode, a graph
replaying K calls on K input sets, K chosen so that the sets together exceed twice the L2 and
each call still starts with its inputs out of cache. With a backward `step`
(harness.measure.gradients), each set is led by its upstream gradients and each call is that pass.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from harness import stats, verdicts
from harness.loading import Case, Problem, Seeds, make_inputs, replicate_all
from harness.measure import (
    checking,
    directed,
    feeding,
    gradients,
    hardware,
    kernelbench,
    timing,
)
from harness.measure.checking import (
    Counted,
    Verdict,
    build_models,
    check_once,
    describe_error,
    guard,
)
from harness.measure.feeding import check_seen
from harness.measure.timing import Call, L2Flush, prepare_call, warm_call
from harness.record import BenchRow, GpuState
from harness.settings import Settings, StopRule
from harness.stats import Interval, Measurement, PerCall, part

Sides = Mapping[str, Callable[..., Any]]  # the models timed side by side, by side's name
Calls = Mapping[str, Callable[[], object]]  # the zero-argument calls timed, by side's name
FORWARD = "forward"  # the kind of a forward row, beside gradients.KINDS
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
        inputs = guard(verdicts.PROBLEM_ERROR, "get_inputs", make_inputs, bench, seed, device)
        keep = checking.keeper(directed.bench_key(index))
        verdict = check_once(problem, bench, models, inputs, device, settings.checking, seed, keep)
        if verdict:
            raise Verdict(verdicts.INCORRECT, f"benchmark {bench.name!r}: {verdict}")
        output, work = hardware.work(problem, models[0], replicate_all(inputs, device), device)
        calls = {"reference": models[0], "solution": models[1]}
        label = f"benchmark {bench.name!r}"
        checker = spot_checker(problem, bench, models[0], device, settings, label)
        timed = sample(calls, bench, seed, inputs, device, settings, timer, checker)
        row = _row(bench.name, inputs, timed, floor, timed[0].note)
        rows.append(dataclasses.replace(row, bytes=work.bytes, flops=work.flops, bound=work.bound))
        if problem.backward:
            drawn = (seed, inputs, (output, work))
            rows += _pass_rows(problem, bench, models, drawn, device, settings, (timer, floor))
        if counted:
            counted(index + 1, len(problem.benchmarks))
    return rows


def _pass_rows(
    problem: Problem,
    bench: Case,
    models: tuple[Any, Any],
    drawn: tuple[int, list[Any], tuple[Any, hardware.Work]],
    device: torch.device,
    settings: Settings,
    timed: tuple[timing.Timer, float | None],
) -> list[BenchRow]:
    """The backward and forward+backward rows of one benchmark (harness.measure.gradients), after
    its gradients are checked on the benchmark's own inputs; `drawn`: the benchmark's seed,
    inputs, and the reference's output on them with its work (hardware.work)."""
    seed, inputs, forward = drawn
    output = forward[0]
    timer, floor = timed
    tolerance_ = settings.checking.tolerance
    with part("gradients"):
        verdict = gradients.check(problem, bench, models, inputs, device, tolerance_, seed)
    if verdict:
        raise Verdict(verdicts.INCORRECT, f"benchmark {bench.name!r}: {verdict}")
    params = gradients.comparable_params(*models)
    by = gradients.described(gradients.backward_by(models[1], replicate_all(inputs, device)))
    counting = gradients.Pass(gradients.BACKWARD, output, params)  # any kind: the same graph
    works = _pass_works(problem, models[0], counting, drawn, device)
    rows = []
    for kind in gradients.KINDS:
        step = gradients.Pass(kind, output, params)
        name = gradients.row_name(bench.name, kind)
        check = gradients.Training(models[0], step.count, params)
        checker = spot_checker(problem, bench, check, device, settings, f"benchmark {name!r}")
        calls = {"reference": models[0], "solution": models[1]}
        sampled = sample(calls, bench, seed, inputs, device, settings, timer, checker, step)
        note = "; ".join(n for n in (sampled[0].note, by) if n) or None
        row = _row(name, inputs, sampled, floor, note)
        work = works[kind]
        rows.append(
            dataclasses.replace(
                row, backward=kind, bytes=work.bytes, flops=work.flops, bound=work.bound
            )
        )
    return rows


def _pass_works(
    problem: Problem,
    reference: Any,
    step: gradients.Pass,
    drawn: tuple[int, list[Any], tuple[Any, hardware.Work]],
    device: torch.device,
) -> dict[str, hardware.Work]:
    """Each backward kind's work (hardware.pass_work), from one backward of the reference on the
    benchmark's inputs, counted; `drawn` as `_pass_rows` takes it."""
    seed, inputs, forward = drawn
    args = step.extend(replicate_all(inputs, device), seed)
    graph = gradients.Backward(reference, step.count, step.params, [args])
    grads, counter = hardware.counted(lambda: graph(*args))
    moved = (args[: step.count], grads)
    return {
        kind: hardware.pass_work(problem, forward, counter, moved, kind == gradients.BOTH, device)
        for kind in gradients.KINDS
    }


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


def spot_checker(
    problem: Problem,
    bench: Case,
    reference: Any,
    device: torch.device,
    settings: Settings,
    label: str,
) -> feeding.SpotChecker:
    """The checker of a side's timed calls: each output against `reference` on the call's
    pristine inputs, by the checks' criterion."""

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
    models: Sides,
    bench: Case,
    seed: int,
    inputs: list[Any],
    device: torch.device,
    settings: Settings,
    timer: timing.Timer,
    checker: feeding.SpotChecker | None = None,
    step: gradients.Pass | None = None,
) -> tuple[SideBySide, Fed | None]:
    """Sample `models` side by side with `timer` (a graph timer when the calls are graph
    replays). With a `checker`, the solution's timed calls are spot checked and its work
    cross-checked with a wall clock (the Fed part, else None). With a `step`, each call is
    that backward pass of its model, on upstream gradients and inputs
    (harness.measure.gradients)."""
    link, spec = directed.LINK, None
    own = {"solution": models["solution"]} if link is not None else models
    made = make_calls(own, (bench, seed), inputs, device, settings, checker, step)
    calls, per_call, note = made
    probe = hardware.open_probe(device) if device.type == "cuda" else None
    if per_call > 1:
        timer = timer_for(device, settings, graphed=True)
    after = probe.after if probe else None
    on_gpu = device.type == "cuda" and per_call == 1
    as_kernelbench = on_gpu and settings.checking.profile == kernelbench.PROFILE
    # KernelBench's eval times with autograd on (its checks run under no_grad): so does the
    # profile, which costs a model with parameters some host time recording the graph.
    with part("timing"), contextlib.nullcontext() if as_kernelbench else torch.no_grad():
        if link is not None:  # the reference's side is the referee's, the rounds the parent's
            method = "kernelbench" if as_kernelbench else timer.method
            spec = _spec(bench, step, method, per_call, device)
            if as_kernelbench:
                timer = kernelbench.KernelBenchTimer(device)
            run = functools.partial(link.sample, spec, calls["solution"], timer, after)
            sampled = guard(verdicts.RUNTIME_ERROR, "timing", run)
        elif as_kernelbench:
            trials = settings.checking.kernelbench_trials
            sample = functools.partial(kernelbench.sample, trials=trials)
            sampled = guard(verdicts.RUNTIME_ERROR, "timing", sample, calls, device)
        else:
            rule = settings.timing.rule
            sampled = guard(
                verdicts.RUNTIME_ERROR,
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
    fed = _fed(calls, solution, checker, (device, settings, on_gpu, spec), side_by_side)
    return side_by_side, fed


def _spec(
    bench: Case, step: gradients.Pass | None, method: str, per_call: int, device: torch.device
) -> directed.Spec:
    """What the parent and the referee are told of a sampling (harness.measure.directed)."""
    kind, params = (FORWARD, ()) if step is None else (step.kind, tuple(step.params))
    return directed.Spec(bench.name, kind, method, params, per_call, str(device))


def _fed(
    calls: Calls,
    solution: feeding.Feed,
    checker: feeding.SpotChecker,
    where: tuple[torch.device, Settings, bool, directed.Spec | None],
    sampled: SideBySide,
) -> Fed:
    """What a row of fed calls gets after its timing: the per-call times (on a GPU), the last
    spot checks, and the wall-clock cross-check for unseen work."""
    device, settings, on_gpu, spec = where
    per_call, host_bound = None, None
    if on_gpu:
        with part("per_call"):
            speedup = sampled.speedup.value
            per_call, host_bound = time_per_call(calls, device, settings, speedup, spec)
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


HOST_BOUND_GAP = 0.10  # per-call and device speedups further apart than this: one side's host
PER_CALL_MAX_SAMPLES = 400
PER_CALL_RSE = 0.01


class PerCallTimer:
    """CUDA events around each call from an idle device, host time included (module doc)."""

    method = "per_call"

    def __init__(self, device: torch.device, flush: str | None = "read") -> None:
        self.flush = L2Flush(device, flush)
        self.device = device

    def run(self, calls: Sequence[Call]) -> list[float]:
        timed = []
        for call in calls:
            prepare_call(call)
            self.flush()
            warm_call(call)  # host caches as a loop of calls leaves them (CudaTimer's doc)
            torch.cuda.synchronize(self.device)  # idle: the call's launches are not hidden
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            timed.append((start, end))
        torch.cuda.synchronize(self.device)
        return [start.elapsed_time(end) * 1e3 for start, end in timed]


def per_call_rule(rule: StopRule) -> StopRule:
    """The rule the per-call times are sampled under: the device time's, with at most a
    quarter of its budget and PER_CALL_MAX_SAMPLES rounds, and a target of PER_CALL_RSE at
    least (host time is noisier than device time, and this figure is the second one)."""
    return StopRule(
        warmup_ms=min(rule.warmup_ms, 20.0),
        min_samples=min(rule.min_samples, PER_CALL_MAX_SAMPLES),
        max_samples=min(rule.max_samples, PER_CALL_MAX_SAMPLES),
        target_rse=max(rule.target_rse, PER_CALL_RSE),
        budget_ms=rule.budget_ms / 4,
    )


def time_per_call(
    calls: Calls,
    device: torch.device,
    settings: Settings,
    device_speedup: float,
    spec: directed.Spec | None = None,
) -> tuple[PerCall, str | None]:
    """The row's per-call times: each call timed from an idle device, host included
    (PerCallTimer), side by side under per_call_rule, with their speedup; and which side is
    host-bound where the two speedups part by more than HOST_BOUND_GAP (else None)."""
    timer = PerCallTimer(device, settings.timing.flush)
    rule = per_call_rule(settings.timing.rule)
    link = directed.LINK
    with torch.no_grad():
        if link is not None and spec is not None:  # the referee's side, as in `sample`
            spec = dataclasses.replace(spec, timer=timer.method)
            run = functools.partial(link.sample, spec, calls["solution"], timer)
            sampled = guard(verdicts.RUNTIME_ERROR, "per-call timing", run)
        else:
            sampled = guard(
                verdicts.RUNTIME_ERROR, "per-call timing", timing.sample, calls, timer, rule
            )
    reference, solution = sampled.measurements["reference"], sampled.measurements["solution"]
    speedup = stats.paired_ratio(reference.times_us, solution.times_us)
    return PerCall(reference, solution, speedup), host_bound(device_speedup, speedup.value)


def host_bound(device_speedup: float, per_call_speedup: float) -> str | None:
    """Which side's host time the per-call speedup shows, where it parts from the device
    speedup by more than HOST_BOUND_GAP: "reference" when it is higher (the reference's calls
    cost more than its kernels), "solution" when it is lower, else None."""
    ratio = per_call_speedup / device_speedup
    if ratio > 1 + HOST_BOUND_GAP:
        return "reference"
    if ratio < 1 - HOST_BOUND_GAP:
        return "solution"
    return None


MAX_GRAPH_SETS = 256
FEED_BYTES = 1 << 30  # input sets per side for the timed calls: at most this many bytes ...
FEED_SETS = (2, 4)  # ... and between this many sets


def make_calls(
    models: Sides,
    drawn: tuple[Case, int],
    inputs: list[Any],
    device: torch.device,
    settings: Settings,
    checker: feeding.SpotChecker | None = None,
    step: gradients.Pass | None = None,
) -> tuple[dict[str, Callable[[], object]], int, str | None]:
    """The zero-argument calls to time, how many model calls each makes, and a note."""
    if settings.timing.mode(device.type) == "cuda_graph":
        try:
            sets = input_sets(drawn, inputs, device, _graph_count(inputs, device), step)
            replays = {name: _graphed(model, sets, device, step) for name, model in models.items()}
            return replays, len(sets), None
        except Exception as err:  # not capturable: time it call by call, and say so
            torch.cuda.synchronize(device)
            note = f"CUDA graph capture failed ({describe_error(err)}); timed call by call"
            return _fed_sides(models, drawn, inputs, device, checker, step), 1, note
    return _fed_sides(models, drawn, inputs, device, checker, step), 1, None


def _fed_sides(
    models: Sides,
    drawn: tuple[Case, int],
    inputs: list[Any],
    device: torch.device,
    checker: feeding.SpotChecker | None,
    step: gradients.Pass | None,
) -> dict[str, Callable[[], object]]:
    """Each model fed from its own copies of the same input sets (harness.measure.feeding); the
    solution's calls spot-checked by `checker`."""
    each = max(hardware.tensor_bytes(inputs), 1)
    count = min(FEED_SETS[1], max(FEED_SETS[0], FEED_BYTES // each))
    sets = input_sets(drawn, inputs, device, count, step)
    fed: dict[str, Callable[[], object]] = {}
    for name, model in models.items():
        own = [replicate_all(s, device) for s in sets]
        call = step.wrap(model, own) if step else model
        fed[name] = feeding.Feed(call, own, checker if name == "solution" else None)
    return fed


def _graph_count(inputs: list[Any], device: torch.device) -> int:
    """Enough input sets that together they exceed twice the L2 (at least 2, at most 256)."""
    l2 = torch.cuda.get_device_properties(device).L2_cache_size
    each = max(hardware.tensor_bytes(inputs), 1)
    return min(MAX_GRAPH_SETS, max(2, math.ceil(2 * l2 / each)))


def input_sets(
    drawn: tuple[Case, int],
    inputs: list[Any],
    device: torch.device,
    count: int,
    step: gradients.Pass | None = None,
) -> list[list[Any]]:
    """`inputs` and `count - 1` more sets, drawn from the seeds after the benchmark's; with a
    `step`, each led by its upstream gradients."""
    bench, seed = drawn
    sets = [inputs] + [
        guard(verdicts.PROBLEM_ERROR, "get_inputs", make_inputs, bench, seed + k, device)
        for k in range(1, count)
    ]
    return [step.extend(s, seed + k) for k, s in enumerate(sets)] if step else sets


def _graphed(
    model: Any, sets: list[list[Any]], device: torch.device, step: gradients.Pass | None = None
) -> Callable[[], object]:
    """A replay of one CUDA graph calling `model` (or its `step`) once on each input set."""
    own = [replicate_all(inputs, device) for inputs in sets]
    model = step.wrap(model, own) if step else model
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side), torch.no_grad():
        for inputs in own[:2]:  # warm up off the capture, as torch's graph docs ask
            model(*inputs)
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        for inputs in own:
            model(*inputs)
    return graph.replay
