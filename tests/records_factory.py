"""Synthetic run records with seeded timing samples, for the summary, diff and chart tests."""

from __future__ import annotations

from typing import Any

import numpy as np

SAMPLES = 60  # samples per timing, as a short real run would hold


def timing(median_us: float, seed: int, noise: float = 0.01) -> dict[str, Any]:
    """A timing whose samples scatter by `noise` (relative) around `median_us`."""
    rng = np.random.default_rng(seed)
    times = (median_us * (1 + noise * rng.standard_normal(SAMPLES))).tolist()
    quartiles = np.percentile(times, [25, 75])
    return {
        "method": "cuda_events",
        "count": SAMPLES,
        "median_us": float(np.median(times)),
        "iqr_us": float(quartiles[1] - quartiles[0]),
        "min_us": min(times),
        "times_us": times,
    }


def bench(
    solution_us: float,
    reference_us: float,
    name: str = "default",
    seed: int = 0,
    new_format: bool = True,
    vs_compile: float | None = None,
) -> dict[str, Any]:
    """A benchmark shape; `new_format=False` leaves out the keys older records lack."""
    entry: dict[str, Any] = {
        "name": name,
        "inputs": ["float32[512,1024]"],
        "reference": timing(reference_us, seed + 1000),
        "solution": timing(solution_us, seed),
    }
    if new_format:
        ratio = reference_us / solution_us
        entry["speedup"] = {"value": ratio, "low": ratio * 0.98, "high": ratio * 1.02}
        entry["compile"] = None
        entry["vs_compile"] = (
            {"value": vs_compile, "low": vs_compile * 0.97, "high": vs_compile * 1.03}
            if vs_compile is not None
            else None
        )
    return entry


def record(
    problem: str,
    solution: str,
    benchmarks: list[dict[str, Any]] | None = None,
    status: str = "ok",
    run_id: str = "20261129-100000-aaaaaa",
    commit: str = "aaaaaaa",
    when: str = "2026-11-29T10:00:00+00:00",
    device: str = "cuda:0",
) -> dict[str, Any]:
    """A run record as the session writes it, with only the keys readers use."""
    return {
        "problem": problem,
        "solution": solution,
        "solution_path": f"solutions/{problem}/{solution}.py",
        "status": status,
        "detail": "",
        "run_id": run_id,
        "time": when,
        "device": device,
        "benchmarks": benchmarks or [],
        "machine": {
            "gpu": "NVIDIA H200",
            "torch": "2.11.0",
            "cuda": "13.0",
            "commit": commit,
            "time": when,
        },
    }
