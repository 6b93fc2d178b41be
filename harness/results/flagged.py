"""The flags of a table's row: what a reader must know before trusting its numbers (a warm
cache, skipped work, noise, throttling, a machine's load, a host-bound side, ...)."""

from __future__ import annotations

from harness.record import BenchRow
from harness.results import load
from harness.results.columns import TableRow
from harness.stats import Interval

NOISY_RSE = 0.01  # a side whose relative standard error ends above this is marked noisy
WITNESS_MIN_SHARE = 0.9  # a call that moves less than this share of the minimum is flagged


def flags(bench: BenchRow, row: TableRow, speedup: Interval) -> list[str]:
    """What a reader must know before trusting the benchmark's numbers; `row` is its table row
    (harness.results.report), `speedup` its device speedup."""
    found = []
    witnessed = row.ncu_pct
    if witnessed is not None and witnessed < 100 * WITNESS_MIN_SHARE:
        found.append(
            f"MOVED {witnessed:.0f}% of the problem's minimum bytes under ncu: skipped work, "
            "or a wrong byte count"
        )
    if row.ceiling_pct and row.ceiling_pct > 100:
        found.append(
            f"ABOVE the copy ceiling ({row.ceiling_pct:.0f}%): a warm cache, a wrong "
            "byte count, or skipped work"
        )
    for side, timing in (("solution", bench.solution), ("reference", bench.reference)):
        if timing.synchronizes:
            found.append(
                f"{side} synchronizes with the device (timed with its synchronisation, as a "
                "loop of such calls runs)"
            )
    if bench.host_bound and bench.per_call:
        per_call, device = bench.per_call.speedup.value, speedup.value
        found.append(
            f"host-bound {bench.host_bound}: {per_call:.2f}x per call against {device:.2f}x on "
            "the device"
        )
    if bench.launch_bound and bench.floor_us is not None:
        found.append(f"launch-bound (floor {bench.floor_us:.1f} us; try --graph)")
    for side, timing in (("solution", bench.solution), ("reference", bench.reference)):
        if timing.rse > NOISY_RSE:
            stopped = f", stopped by {bench.stop}" if bench.stop else ""
            found.append(f"noisy {side} (RSE {100 * timing.rse:.1f}%{stopped})")
    if row.throttled_samples and bench.state:
        reasons = ", ".join(bench.state.reasons)
        found.append(f"throttled: {row.throttled_samples} samples ({reasons})")
    busy = load.Load(row.load_1m, row.cpu_count, row.gpu_processes, bool(row.cpu_timed))
    found += load.flags(busy)
    if bench.note:
        found.append(bench.note)
    if bench.compile and bench.compile.mismatch:
        found.append("torch.compile's output differs from eager's: no 'vs compile'")
    return found
