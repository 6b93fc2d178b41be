"""Synthetic run records with seeded timing samples, for the report, summary, diff and chart
tests."""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.record import BenchRow, Machine, Measurement, RunRecord
from harness.settings import Settings
from harness.stats import Interval

SAMPLES = 60  # samples per timing, as a short real run would hold
INPUTS = ("float32[512,1024]",)


def timing(median_us: float, seed: int, noise: float = 0.01) -> Measurement:
    """A timing whose samples scatter by `noise` (relative) around `median_us`."""
    rng = np.random.default_rng(seed)
    times = median_us * (1 + noise * rng.standard_normal(SAMPLES))
    return Measurement(tuple(float(t) for t in times), "cuda_events")


def bench(
    solution_us: float,
    reference_us: float,
    name: str = "default",
    seed: int = 0,
    new_format: bool = True,
    vs_compile: float | None = None,
) -> BenchRow:
    """A benchmark shape; `new_format=False` leaves out what older records lack."""
    reference, solution = timing(reference_us, seed + 1000), timing(solution_us, seed)
    if not new_format:
        return BenchRow(name, INPUTS, reference, solution)
    ratio = reference_us / solution_us
    return BenchRow(
        name,
        INPUTS,
        reference,
        solution,
        speedup=Interval(ratio, ratio * 0.98, ratio * 1.02),
        mode="cuda_events",
        stop="target",
        vs_compile=(
            Interval(vs_compile, vs_compile * 0.97, vs_compile * 1.03)
            if vs_compile is not None
            else None
        ),
    )


def record(
    problem: str,
    solution: str,
    benchmarks: list[BenchRow] | None = None,
    status: str = "ok",
    run_id: str = "20261129-100000-aaaaaa",
    commit: str = "aaaaaaa",
    when: str = "2026-11-29T10:00:00+00:00",
    device: str = "cuda:0",
    path: str | None = None,
    detail: str = "",
    busy: dict[str, Any] | None = None,
) -> RunRecord:
    """A run record as the session builds it; `busy` is the machine's load
    (load_1m, cpu_count, gpu_processes), not recorded where None."""
    return RunRecord(
        run_id=run_id,
        time=when,
        problem=problem,
        reference=f"problems/{problem}/reference.py",
        solution=solution,
        solution_path=path or f"solutions/{problem}/{solution}.py",
        solution_hash="0" * 64,
        log=f"logs/{run_id}/{solution}.log",
        cases=4,
        settings=Settings(device="cuda:0", arch="9.0"),
        machine=Machine(
            device="cuda:0",
            gpu="NVIDIA H200",
            torch="2.11.0",
            cuda="13.0",
            commit=commit,
            time=when,
            **(busy or {}),
        ),
        status=status,
        detail=detail,
        checks=20 if status == "ok" else 0,
        benchmarks=tuple(benchmarks or ()),
        device=device,
    )
