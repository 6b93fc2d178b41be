"""KernelBench's evaluator, reproduced: what `run.py --as kernelbench` changes.

Read from ScalingIntelligence/KernelBench (`src/kernelbench/eval.py` and `timing.py`, 2026):

- Semantics: both models in the mode their constructors leave them, outputs under
  torch.no_grad(), torch's generators seeded before each call. The harness does the same in
  every profile (harness.measure.checking, harness.measure.checking).
- Criterion: on each of 5 trials (`--trials`, whose default is 5), the output must have the
  reference's shape and pass `torch.allclose(reference, output, atol=tol, rtol=tol)`, NaN never
  equal to NaN; `tol` from its precision table (harness.tolerance.KERNELBENCH_BY_DTYPE: 1e-4
  for float32), or `--kernelbench-tolerance` (KernelBench v0 and v0.1 used 1e-2). It replaces
  this harness's rule (bounds by dtype and the float64 part); every other check of the harness
  (the defences: secret input seeds, held tensors, poisoned memory, a second call, spot checks of
  timed calls, the profiler, unseen work) stays, and a solution rejected by one is marked as such
  (`DEFENCE_NOTE`), since KernelBench's criterion alone would not have judged it so.
- Timer (`time_execution_with_cuda_event`): WARMUP_CALLS calls, each followed by a
  synchronize, then `torch.cuda.empty_cache()`; then per trial: synchronize, fill a fresh
  256 MiB int64 tensor of FILL_SHAPE (to thrash L2), CUDA events around one call,
  synchronize. TRIALS trials (`--kernelbench-trials`, KernelBench's num_perf_trials) after
  DISCARDED discarded ones; the figure is their mean. The
  solution is timed first, then the reference, each on its own; the speedup is the reference's
  mean over the solution's (stats.mean_ratio gives its interval).

No device profile runs before the timing in the worker (harness.measure.profiling): with one
before it, CUPTI stays attached and inflates KernelBench's timer (docs/kernelbench.md).

Unlike this harness's own timer, the fill hides only the host time it takes to run on the
device (docs/kernelbench.md): a reference whose eager launches take longer is timed with
part of its host overhead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from harness import tolerance
from harness.accuracy import Index, blocks
from harness.matching import Tally, differ
from harness.measure.timing import Call, Sampled, prepare_call
from harness.settings import KERNELBENCH
from harness.stats import Measurement

PROFILE = KERNELBENCH
WARMUP_CALLS = 3
TRIALS = 100
DISCARDED = 1
FILL_SHAPE = (32, 1024, 1024)  # int64: 256 MiB
ORDER = ("solution", "reference")  # KernelBench times the new model first
DEFENCE_NOTE = (
    " (a defence of this harness: KernelBench's own evaluator does not check this, and its "
    "criterion alone would not have judged the solution so)"
)


def mismatch(
    expected: Any, actual: Any, override: float | None = None, where: str = "output"
) -> str | None:
    """None when `actual` passes KernelBench's criterion against `expected`, else one line
    saying where it fails. Tuples and lists are compared item by item (KernelBench itself
    compares single tensors only)."""
    if isinstance(expected, (tuple, list)):
        if not isinstance(actual, (tuple, list)) or len(actual) != len(expected):
            return f"{where}: expected {len(expected)} items in a {type(expected).__name__}"
        for index, (e, a) in enumerate(zip(expected, actual, strict=True)):
            report = mismatch(e, a, override, f"{where}[{index}]")
            if report:
                return report
        return None
    if not isinstance(expected, torch.Tensor):
        expected = torch.tensor(expected)
    if not isinstance(actual, torch.Tensor):
        return f"{where}: expected a Tensor, got {type(actual).__name__}"
    if actual.shape != expected.shape:
        return f"{where}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
    if actual.dtype != expected.dtype:
        return f"{where}: dtype {actual.dtype}, expected {expected.dtype} (allclose refuses it)"
    tol = tolerance.kernelbench(expected.dtype, override)
    expected, actual = expected.detach(), actual.detach().to(expected.device)  # where it lives

    def outside(index: Index, e: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        return ~torch.isclose(e, a, atol=tol, rtol=tol)  # allclose(expected, actual)'s test

    if not differ(expected, actual, outside):  # a block at a time: any size fits
        return None
    tally = Tally()
    for block in blocks(expected.shape):
        e, a = expected[block], actual[block]
        tally.add(block, e, a, outside(block, e, a))
    largest = "nan" if tally.max_abs is None else f"{tally.max_abs:.3g}"
    first = tally.positions[0] if tally.positions else []
    shown = (
        f"; first at {first}: expected {expected[tuple(first)].item():.6g} got "
        f"{actual[tuple(first)].item():.6g}"
        if first or expected.dim() == 0
        else ""
    )
    return (
        f"{where}: {tally.bad} of {expected.numel()} elements fail KernelBench's allclose "
        f"(atol = rtol = {tol:g}, NaN never equal); max abs err {largest}{shown}"
    )


class KernelBenchTimer:
    """KernelBench's cuda_event timer (see the module doc), one call at a time."""

    method = "kernelbench"

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def run(self, calls: Sequence[Call]) -> list[float]:
        times = []
        for call in calls:
            prepare_call(call)
            torch.cuda.synchronize(self.device)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            fill = torch.empty(FILL_SHAPE, dtype=torch.int64, device=self.device)
            fill.fill_(42)
            del fill
            start.record()
            call()
            end.record()
            torch.cuda.synchronize(self.device)
            times.append(start.elapsed_time(end) * 1e3)
        return times

    def warm_up(self, call: Call) -> None:
        for _ in range(WARMUP_CALLS):
            prepare_call(call)
            call()
            torch.cuda.synchronize(self.device)
        torch.cuda.empty_cache()


def sample(
    calls: dict[str, Call],
    device: torch.device,
    timer: KernelBenchTimer | None = None,
    trials: int | None = None,
) -> Sampled:
    """Each call timed on its own, KernelBench's way: solution first, then the reference
    (`timer`, a KernelBenchTimer on `device` unless one is given), `trials` times each
    (TRIALS unless given)."""
    timer = timer or KernelBenchTimer(device)
    trials = trials or TRIALS
    measured = {}
    for name in sorted(calls, key=lambda n: ORDER.index(n) if n in ORDER else len(ORDER)):
        timer.warm_up(calls[name])
        times = timer.run([calls[name]] * (trials + DISCARDED))[DISCARDED:]
        measured[name] = Measurement(tuple(times), timer.method)
    return Sampled({name: measured[name] for name in calls}, "kernelbench", [trials])
