"""Per-call times: each call timed from an idle device, its host time included.

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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from harness import stats, status
from harness.measure import timing
from harness.measure.checking import guard
from harness.measure.timing import Call, L2Flush, prepare_call, warm_call
from harness.measurement import PerCall
from harness.settings import Settings, StopRule

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


def measure(
    calls: dict[str, Any], device: torch.device, settings: Settings, device_speedup: float
) -> tuple[PerCall, str | None]:
    """The row's per-call times: each call timed from an idle device, host included
    (PerCallTimer), side by side under per_call_rule, with their speedup; and which side is
    host-bound where the two speedups part by more than HOST_BOUND_GAP (else None)."""
    timer = PerCallTimer(device, settings.timing.flush)
    rule = per_call_rule(settings.timing.rule)
    with torch.no_grad():
        sampled = guard(status.RUNTIME_ERROR, "per-call timing", timing.sample, calls, timer, rule)
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
