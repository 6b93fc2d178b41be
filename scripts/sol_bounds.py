"""Each problem's speed-of-light bound on this machine's GPU (issue 47, docs/results.md).

    python scripts/sol_bounds.py PROBLEM_OR_FOLDER... [--csv OUT] [--device cuda]

For each reference file (a folder: its *.py files, or its problems' reference.py), each of its
benchmarks built as a run builds it (the model from its init inputs, its inputs drawn on the
device), the reference run once under the FLOP count (harness.measure.hardware.work), and
T_SOL: the larger of its bytes over the copy bandwidth measured here and its FLOPs over their
precision's peak. One line per benchmark, and the whole as a CSV with --csv. A problem that
fails to load or run says why and the others go on.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.loading import Case, Problem, load_problem, make_init_inputs, make_inputs
from harness.measure import hardware
from harness.stats import sol_sides_us

FIELDS = (
    "problem",
    "benchmark",
    "bytes",
    "flops",
    "flop_class",
    "peak_tflops",
    "memory_us",
    "compute_us",
)
FIELDS += ("sol_us", "partial", "error")


def reference_files(paths: list[Path]) -> list[Path]:
    """The reference files named, or found in the folders named, in order."""
    found: list[Path] = []
    for path in paths:
        if path.is_file():
            found.append(path)
        elif (path / "reference.py").is_file():
            found.append(path / "reference.py")
        else:
            nested = sorted(path.glob("*/reference.py"))
            found.extend(nested or sorted(path.glob("*.py")))
    return found


def bounds(path: Path, device: torch.device, copy_gbps: float | None) -> list[dict[str, object]]:
    """One problem's lines, a benchmark each: its work and T_SOL, or the error that stopped it."""
    name = path.parent.name if path.name == "reference.py" else path.stem
    try:
        problem = load_problem(name, path)
    except Exception as err:  # the problem's own failure: say it, go on
        return [{"problem": name, "error": f"{type(err).__name__}: {err}"[:200]}]
    return [one(problem, bench, device, copy_gbps) for bench in problem.benchmarks]


def one(
    problem: Problem, bench: Case, device: torch.device, copy: float | None
) -> dict[str, object]:
    line: dict[str, object] = {"problem": problem.name, "benchmark": bench.name}
    try:
        model = problem.model(*make_init_inputs(bench, device)).to(device)
        _, work = hardware.work(problem, model, make_inputs(bench, 0, device), device)
    except Exception as err:  # the problem's own failure: say it, go on
        return line | {"error": f"{type(err).__name__}: {err}"[:200]}
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()
    peak = work.bound.peak_tflops
    memory_us, compute_us = sol_sides_us(work.bytes, work.flops, copy, peak)
    sol_us = max(memory_us or 0.0, compute_us or 0.0) or None
    line |= {"bytes": work.bytes, "flops": work.flops, "flop_class": work.bound.flop_class}
    line |= {"peak_tflops": peak, "memory_us": memory_us, "compute_us": compute_us}
    return line | {"sol_us": sol_us, "partial": work.bound.partial}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", type=Path, nargs="+", help="reference files or folders")
    parser.add_argument("--csv", type=Path, help="write every line here too")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    copy_gbps = hardware.measure_copy(device).copy_gbps if device.type == "cuda" else None
    print(f"copy bandwidth: {copy_gbps and round(copy_gbps)} GB/s on {device}", flush=True)
    lines = []
    with open(args.csv or "/dev/null", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)  # line by line: a stopped run keeps them
        writer.writeheader()
        for path in reference_files(args.paths):
            for line in bounds(path, device, copy_gbps):
                lines.append(line)
                writer.writerow(line)
                handle.flush()
                shown = {k: v for k, v in line.items() if v is not None and k != "problem"}
                print(f"{line['problem']}: {shown}", flush=True)
    counted = sum(1 for line in lines if line.get("sol_us"))
    partial = sum(1 for line in lines if line.get("partial"))
    failed = sum(1 for line in lines if line.get("error"))
    print(f"{len(lines)} benchmarks: {counted} with T_SOL ({partial} partial), {failed} failed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
