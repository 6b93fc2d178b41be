"""Validate the harness's timing against triton's do_bench, itself, and a plain copy.

A benchmark script, not a test: run it on the GPU machine.

  kernels      a tiny one, two near 20 us and one near 200 us, each timed by the harness's
               timer and stopping rule (L2 flushed by reading a 2x L2 buffer), by the same with
               a flush that writes the buffer instead (leaving dirty lines, as do_bench's
               does), and by triton.testing.do_bench (median, its own 256 MB cache flush).
               Target: within 5% of do_bench from 20 us up.
  copy         the copy bandwidth the harness reports (`<results>/<gpu>/ceiling.json`) against
               a plain 2 GiB `copy_` timed with CUDA events. Target: within 5%.
  two runs     with --runs A B (two results folders of `run.py` on the same code): every
               row's solution median in A against B. Target: within 3%.

  usage: python scripts/validate_timing.py [--results results] [--runs A B] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


from harness.measure import hardware
from harness.measure.timing import CudaTimer, sample
from harness.record import read as read_records
from harness.results import report, summary
from harness.run import machine
from harness.settings import StopRule

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20


def kernels(device: torch.device) -> dict[str, Callable[[], object]]:
    tiny = torch.zeros(4096, device=device)
    x64 = torch.randn(64 * MIB // 4, device=device)
    x48, y48 = torch.randn(48 * MIB // 4, device=device), torch.empty(48 * MIB // 4, device=device)
    x384 = torch.randn(384 * MIB // 4, device=device)
    y384 = torch.empty_like(x384)
    return {
        "add_ 16 KiB (tiny)": lambda: tiny.add_(1),
        "sum 64 MiB (~20 us)": lambda: x64.sum(),
        "mul 48 MiB in+out (~25 us)": lambda: torch.mul(x48, 2, out=y48),
        "mul 384 MiB in+out (~200 us)": lambda: torch.mul(x384, 2, out=y384),
    }


def harness_median(timer: CudaTimer, fn: Callable[[], object]) -> dict[str, Any]:
    sampled = sample({"k": fn}, timer, StopRule())
    measured = sampled.measurements["k"]
    return {"median_us": measured.median_us, "n": measured.count, "stop": sampled.stop}


def do_bench_median(fn: Callable[[], object]) -> float | None:
    try:
        from triton.testing import do_bench
    except ImportError:
        return None
    return float(do_bench(fn, warmup=25, rep=200, return_mode="median")) * 1e3


def compare_kernels(device: torch.device) -> list[dict[str, Any]]:
    read_timer, write_timer = CudaTimer(device), CudaTimer(device, flush="write")
    rows = []
    for name, fn in kernels(device).items():
        ours = harness_median(read_timer, fn)
        dirty = harness_median(write_timer, fn)
        theirs = do_bench_median(fn)
        row = {"kernel": name, "harness": ours, "harness_write_flush": dirty, "do_bench_us": theirs}
        if theirs:
            row["harness_vs_do_bench"] = ours["median_us"] / theirs - 1
            row["write_flush_vs_do_bench"] = dirty["median_us"] / theirs - 1
        rows.append(row)
    return rows


def plain_copy_gbps(device: torch.device, reps: int = 20) -> float:
    src = torch.ones(2048 * MIB // 4, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return 2 * src.numel() * 4 / statistics.median(times) / 1e3


def compare_copy(device: torch.device, results: Path) -> dict[str, Any]:
    info = machine.describe(device, ROOT)
    ceiling = hardware.ceiling(results / machine.slug(info), device, info)
    plain = plain_copy_gbps(device)
    reported = ceiling.copy_gbps if ceiling else None
    return {
        "reported_gbps": reported,
        "plain_copy_gbps": plain,
        "difference": reported / plain - 1 if reported else None,
    }


def compare_runs(first: Path, second: Path) -> list[dict[str, Any]]:
    """Every (problem, solution, shape) row's solution median in both runs."""

    def medians(folder: Path) -> dict[tuple[str, str, str], float]:
        found = {}
        for record in summary.latest_records(read_records(folder)):
            for bench in record.benchmarks:
                key = (record.problem, record.solution, report.bench_label(bench))
                found[key] = bench.solution.median_us
        return found

    a, b = medians(first), medians(second)
    return [
        {"row": "/".join(key), "first_us": a[key], "second_us": b[key], "diff": b[key] / a[key] - 1}
        for key in sorted(a.keys() & b.keys())
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=ROOT / "results")
    parser.add_argument("--runs", nargs=2, type=Path, metavar=("A", "B"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    device = torch.device("cuda")
    out: dict[str, Any] = {"kernels": compare_kernels(device)}
    out["copy"] = compare_copy(device, args.results)
    if args.runs:
        out["runs"] = compare_runs(*args.runs)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    print_summary(out)


def print_summary(out: dict[str, Any]) -> None:
    print("kernel | harness us (n, stop) | write-flush us | do_bench us | harness vs do_bench")
    for row in out["kernels"]:
        ours, dirty, theirs = row["harness"], row["harness_write_flush"], row["do_bench_us"]
        versus = f"{100 * row['harness_vs_do_bench']:+.1f}%" if theirs else "no triton"
        print(
            f"{row['kernel']} | {ours['median_us']:.2f} ({ours['n']}, {ours['stop']}) | "
            f"{dirty['median_us']:.2f} | {theirs or float('nan'):.2f} | {versus}"
        )
    copy = out["copy"]
    print(
        f"copy: reported {copy['reported_gbps']:.0f} GB/s, plain 2 GiB copy_ "
        f"{copy['plain_copy_gbps']:.0f} GB/s ({100 * (copy['difference'] or 0):+.1f}%)"
    )
    if out.get("runs"):
        worst = max(out["runs"], key=lambda r: abs(r["diff"]))
        print(
            f"two runs: {len(out['runs'])} rows, worst {worst['row']} {100 * worst['diff']:+.1f}%"
        )
        for row in out["runs"]:
            print(f"  {row['row']}: {row['first_us']:.2f} vs {row['second_us']:.2f} us")


if __name__ == "__main__":
    main()
