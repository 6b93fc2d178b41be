"""A problem table's columns: the row type (`TableRow`), the markdown table's headers
(`COLUMNS`) and the CSV's order (`CSV_COLUMNS`). harness.results.report fills the rows."""

from __future__ import annotations

from dataclasses import dataclass

from harness.results import load

COLUMNS = {  # column: header in the markdown table
    "solution": "solution",
    "shape": "shape",
    "status": "status",
    "median_us": "time (us)",
    "iqr_pct": "IQR",
    "n": "n",
    "ref_median_us": "eager (us)",
    "speedup": "speedup [95% CI]",
    "per_call_speedup": "per call [95% CI]",
    "vs_compile": "vs compile",
    "gbps": "GB/s",
    "ceiling_pct": "of copy",
    "when": "run (UTC)",
    "notes": "notes",  # detail, flags and log (harness.results.report.notes)
}

# The CSV's columns beyond the table's, in order (written as words to keep the list short).
CSV_EXTRA = """
    speedup speedup_low speedup_high vs_compile vs_compile_low vs_compile_high
    per_call_us ref_per_call_us per_call_speedup per_call_speedup_low per_call_speedup_high
    host_bound compile_median_us compile_cached compile_mismatch ref_iqr_pct rse ref_rse stop mode
    floor_us launch_bound bytes flops tflops ncu_bytes ncu_pct ncu_kernels sm_mhz temp_c
    throttled_samples own_share reference_share
"""
CSV_COLUMNS = [
    *(c for c in COLUMNS if c not in ("notes", "speedup", "per_call_speedup", "vs_compile")),
    *CSV_EXTRA.split(),
    *load.CSV_COLUMNS,
    *"flags detail warnings log solution_path run_id".split(),  # noqa: SIM905
]


@dataclass(frozen=True)
class TableRow:
    """One line of a problem's table and CSV: a solution's benchmark shape, or its verdict
    alone where it did not reach timing (then every timing column is None)."""

    # the solution and its record
    solution: str
    status: str
    when: str
    detail: str
    warnings: str
    log: str | None
    solution_path: str
    run_id: str
    own_share: float | None
    reference_share: float | None
    shape: str = "-"
    # the times, the speedups and their intervals
    median_us: float | None = None
    iqr_pct: float | None = None
    n: int | None = None
    ref_median_us: float | None = None
    ref_iqr_pct: float | None = None
    speedup: float | None = None
    speedup_low: float | None = None
    speedup_high: float | None = None
    rse: float | None = None
    ref_rse: float | None = None
    stop: str | None = None
    mode: str | None = None
    floor_us: float | None = None
    launch_bound: bool | None = None
    # per call, host included
    per_call_us: float | None = None
    ref_per_call_us: float | None = None
    per_call_speedup: float | None = None
    per_call_speedup_low: float | None = None
    per_call_speedup_high: float | None = None
    host_bound: str | None = None
    # the work, and the roof
    bytes: int | None = None
    flops: int | None = None
    gbps: float | None = None
    tflops: float | None = None
    ceiling_pct: float | None = None
    # torch.compile
    vs_compile: float | None = None
    vs_compile_low: float | None = None
    vs_compile_high: float | None = None
    compile_median_us: float | None = None
    compile_cached: bool | None = None
    compile_mismatch: str | None = None
    # what ncu counted (--ncu), the GPU's state, the machine's load
    ncu_bytes: int | None = None
    ncu_pct: float | None = None
    ncu_kernels: int | None = None
    sm_mhz: str | None = None
    temp_c: str | None = None
    throttled_samples: int | None = None
    load_1m: float | None = None
    cpu_count: int | None = None
    gpu_processes: int | None = None
    cpu_timed: bool | None = None  # not in the CSV: load.flags reads it
    flags: str | None = None
