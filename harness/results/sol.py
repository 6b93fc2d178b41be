"""The speed of light of a benchmark's row (docs/results.md): T_SOL, the larger of its bytes over
the copy ceiling and its FLOPs over their precision's peak; the share of it a solution reaches,
and its SOL scores against eager PyTorch and the torch.compile'd reference."""

from __future__ import annotations

from typing import Any

from harness import stats
from harness.record import BenchRow, Ceiling


def side_time(bench: BenchRow) -> Any:
    """How a side's time is summed up: the mean under KernelBench's timer, as it reports it;
    else the median."""
    if bench.mode == "kernelbench":
        return lambda measured: measured.mean_us
    return lambda measured: measured.median_us


def sol_us(bench: BenchRow, ceiling: Ceiling | None) -> tuple[float | None, str | None]:
    """The benchmark's speed of light, T_SOL in microseconds: the larger of its bytes over the
    copy ceiling and its FLOPs over their precision's peak (docs/results.md); and why it misses
    work where it does. (None, None) off a GPU or without a ceiling or bytes."""
    if ceiling is None or not bench.bytes:
        return None, None
    bound = bench.bound
    peak = bound.peak_tflops if bound else None
    memory_us, compute_us = stats.sol_sides_us(bench.bytes, bench.flops, ceiling.copy_gbps, peak)
    sol = max(memory_us or 0.0, compute_us or 0.0)
    if bound is None:  # a record made before FLOPs were counted
        return sol, "FLOPs not counted when this row was measured"
    return sol, bound.partial


def sol_reached(bench: BenchRow, ceiling: Ceiling | None) -> tuple[float, float | None] | None:
    """The share of T_SOL the solution reaches (T_SOL over its time) and its SOL score against
    eager PyTorch (stats.sol_score), or None where the row has no bound."""
    sol, _ = sol_us(bench, ceiling)
    return None if sol is None else reached_at(bench, sol)


def reached_at(bench: BenchRow, sol: float) -> tuple[float, float | None]:
    """`sol_reached` for a row whose T_SOL (`sol_us`) is `sol`."""
    center = side_time(bench)
    median_us = center(bench.solution)
    return sol / median_us, stats.sol_score(median_us, center(bench.reference), sol)
