"""The torch.compile baseline: the reference eager and compiled, timed side by side per
benchmark (harness.measure.benchmarking's sampling), compile time kept apart; run by a worker
of its own and cached by the parent (harness.results.baselines). A compiled reference whose
output differs from eager's is recorded with the difference; a shape whose compiled calls are
too slow to sample within --timeout is left out, with the reason, and the others are timed."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from harness import accuracy, verdicts
from harness.job import BuildEnd, BuildStart
from harness.loading import Case, Problem, Seeds, make_inputs
from harness.matching import mismatch
from harness.measure import gradients, timing
from harness.measure.benchmarking import (
    SideBySide,
    describe_inputs,
    sample,
    synchronize,
    timer_for,
)
from harness.measure.checking import build_models, guard
from harness.record import CompiledRow
from harness.settings import Settings
from harness.tolerance import allowed

COMPILE_BUILD = "torch.compile"  # the build a compile baseline reports for each compile
Notify = Callable[[BuildStart | BuildEnd], None]  # the worker's `send`
T = TypeVar("T")


def compile_baseline(
    problem: Problem,
    device: torch.device,
    settings: Settings,
    notify: Notify = lambda event: None,
) -> tuple[list[CompiledRow], dict[str, str]]:
    """Eager and torch.compile'd reference, side by side, per benchmark; compile time apart:
    the rows timed, and by row name why each other row was not (a shape whose compiled calls
    cannot be sampled within --timeout: `_unfinishable`). Each compile is a build to the
    parent (`notify`: BuildStart, then BuildEnd), so that it runs under --build-timeout, not
    the time step's --timeout: Inductor compiling C++ on a CPU with a cold cache takes
    minutes."""
    timer = timer_for(device, settings)
    seeds = Seeds.of(settings.checking)
    rows: list[CompiledRow] = []
    untimed: dict[str, str] = {}
    for index, bench in enumerate(problem.benchmarks):
        seed = seeds.benchmark(index)
        eager, _ = build_models(problem, problem.model, bench, seed, device)
        inputs = guard(verdicts.PROBLEM_ERROR, "get_inputs", make_inputs, bench, seed, device)
        compiled = torch.compile(eager)
        calls = {"reference": eager, "compiled": compiled}
        first_calls = functools.partial(_forward_once, calls, inputs, device)
        (got, want, round_s), framed_s = _compiling(first_calls, device, notify)
        too_slow = _unfinishable(round_s, settings)
        if too_slow:
            names = [bench.name]
            if problem.backward:
                names += [gradients.row_name(bench.name, kind) for kind in gradients.KINDS]
            untimed.update(dict.fromkeys(names, too_slow))
            continue
        compile_s = framed_s - sum(round_s.values())  # the first calls alone, as before
        bounds = allowed(problem, bench, settings.checking.tolerance)
        differs = mismatch(want, got, bounds, accuracy.Exact(eager, inputs, device))
        sampled, _ = sample(calls, bench, seed, inputs, device, settings, timer)
        rows.append(_compiled_row(bench.name, inputs, (compile_s, differs), sampled))
        if problem.backward:
            drawn = (seed, inputs, want)
            timed = (device, settings, timer)
            rows += _compiled_passes(problem, bench, (eager, compiled), drawn, timed, notify)
    return rows, untimed


def _forward_once(
    calls: dict[str, Any], inputs: list[Any], device: torch.device
) -> tuple[Any, Any, dict[str, float]]:
    """The compiled reference's first output (the call that compiles it) and eager's, then one
    more call of each, timed: what a round of the sampling will cost (`_unfinishable`).
    That call runs inside the compile's build frame, under --build-timeout, so that a compiled
    call slower than the time step's --timeout is found out, not killed."""
    with torch.no_grad():
        got = guard(verdicts.RUNTIME_ERROR, "torch.compile", calls["compiled"], *inputs)
        want = calls["reference"](*inputs)
        seconds = {}
        for name, call in calls.items():
            synchronize(device)
            started = time.perf_counter()
            guard(verdicts.RUNTIME_ERROR, f"{name}, timed once", call, *inputs)
            synchronize(device)
            seconds[name] = time.perf_counter() - started
        return got, want, seconds


def _compiling(
    first_call: Callable[[], T], device: torch.device, notify: Notify
) -> tuple[T, float]:
    """`first_call()` (the one that compiles), framed as a build for the parent, and its
    seconds."""
    notify(BuildStart(COMPILE_BUILD))
    begin = time.perf_counter()
    try:
        done = first_call()
        synchronize(device)
        return done, time.perf_counter() - begin
    finally:
        notify(BuildEnd(COMPILE_BUILD, time.perf_counter() - begin))


def _unfinishable(round_s: dict[str, float], settings: Settings) -> str | None:
    """Why a warm-up and --min-samples rounds of calls that take `round_s` seconds each cannot
    end within the time step's --timeout, or None where they can. On a CPU, Inductor's code
    for some operators is far slower than eager (multilabel_margin_loss at 4096x8192: minutes
    a call), and sampling it would only be killed at the limit."""
    rounds = 1 + settings.timing.rule.min_samples
    needed = rounds * sum(round_s.values())
    limit = settings.limits.run_s
    if needed <= limit:
        return None
    eager = round_s.get("reference", 0.0)
    return (
        f"a compiled call takes {round_s['compiled']:.3g} s here (eager {eager:.3g} s): a "
        f"warm-up and {rounds - 1} samples need ~{needed:.0f} s, past --timeout {limit:g} s "
        "(raise it to time them)"
    )


def _compiled_passes(
    problem: Problem,
    bench: Case,
    models: tuple[Any, Any],
    drawn: tuple[int, list[Any], Any],
    timed: tuple[torch.device, Settings, timing.Timer],
    notify: Notify,
) -> list[CompiledRow]:
    """The compile baseline's backward and forward+backward rows: the compiled reference's
    first backward (its compilation) timed apart, and its gradients compared with eager's."""
    seed, inputs, output = drawn
    device, settings, timer = timed
    eager, compiled = models
    # A compiled backward frees ("donates") buffers it no longer needs unless told not to, and
    # then refuses the retained graph that the backward row runs through again and again.
    torch._functorch.config.donated_buffer = False
    params = gradients.param_names(eager)
    first = gradients.Pass(gradients.BOTH, output, params)
    given = first.extend(inputs, seed)
    backward = first.wrap(compiled, [])
    got, compile_s = _compiling(
        lambda: guard(verdicts.RUNTIME_ERROR, "torch.compile, backward", backward, *given),
        device,
        notify,
    )
    training = first.wrap(eager, [])
    exact = accuracy.Exact(training, given, device)
    bounds = allowed(problem, bench, settings.checking.tolerance)
    differs = mismatch(training(*given), got, bounds, exact)
    rows = []
    for kind in gradients.KINDS:
        step = gradients.Pass(kind, output, params)
        name = gradients.row_name(bench.name, kind)
        calls = {"reference": eager, "compiled": compiled}
        sampled, _ = sample(calls, bench, seed, inputs, device, settings, timer, None, step)
        rows.append(_compiled_row(name, inputs, (compile_s, differs), sampled))
    return rows


def _compiled_row(
    name: str, inputs: list[Any], compiling: tuple[float, str | None], sampled: SideBySide
) -> CompiledRow:
    """A compile baseline's row: its sampling, how long compiling took and how its output
    differs from eager's (None where it does not)."""
    compile_s, differs = compiling
    return CompiledRow(
        name=name,
        inputs=tuple(describe_inputs(inputs)),
        compiled=sampled.sides["compiled"],
        reference=sampled.sides["reference"],
        speedup=sampled.speedup,
        compile_s=compile_s,
        mismatch=differs,
        mode=sampled.mode,
        stop=sampled.stop,
        note=sampled.note,
        state=sampled.state,
    )
