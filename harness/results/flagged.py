"""The flags of a table's row: what a reader must know before trusting its numbers (a warm
cache, skipped work, noise, throttling, a machine's load, a host-bound side, ...)."""

from __future__ import annotations

from typing import Any

from harness.record import BenchRow
from harness.results import load
from harness.stats import Interval

NOISY_RSE = 0.01  # a side whose relative standard error ends above this is marked noisy
WITNESS_MIN_SHARE = 0.9  # a call that moves less than this share of the minimum is flagged


def flags(bench: BenchRow, columns: dict[str, Any], speedup: Interval) -> list[str]:
    """What a reader must know before trusting the row's numbers; `columns` are the row's
    table columns (harness.results.report), `speedup` its device speedup."""
    found = []
    witnessed = columns.get("ncu_pct")
    if witnessed is not None and witnessed < 100 * WITNESS_MIN_SHARE:
        found.append(
            f"MOVED {witnessed:.0f}% of the problem's minimum bytes under ncu: skipped work, "
            "or a wrong byte count"
        )
    if columns.get("ceiling_pct") and columns["ceiling_pct"] > 100:
        found.append(
            f"ABOVE the copy ceiling ({columns['ceiling_pct']:.0f}%): a warm cache, a wrong "
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
    if columns.get("throttled_samples") and bench.state:
        reasons = ", ".join(bench.state.reasons)
        found.append(f"throttled: {columns['throttled_samples']} samples ({reasons})")
    found += load.flags(columns)
    if bench.note:
        found.append(bench.note)
    if bench.compile and bench.compile.mismatch:
        found.append("torch.compile's output differs from eager's: no 'vs compile'")
    return found
