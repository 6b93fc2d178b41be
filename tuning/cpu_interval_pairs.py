"""How often two back-to-back CPU runs of one solution give speedup intervals that exclude each
other (issue 64 item 2; docs/timing.md, "Run to run on a CPU").

One run.py call judges RUNS copies of the solution in turn (the same build: the cache is keyed by
content), each a job of its own (its worker and referee started afresh), as back-to-back runs
would; each pair of neighbours (1-2, 2-3, ...) is compared shape by shape. With --load N, N busy
processes compete for the CPUs throughout.

    python tuning/cpu_interval_pairs.py --runs 21 --load 0 --json out.json [-- RUN.PY FLAGS]
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def spin() -> None:
    while True:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problem", default="multilabel_margin")
    parser.add_argument("--solution", default="solutions/multilabel_margin/cpu_cpp.py")
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--load", type=int, default=0, help="busy processes beside the runs")
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("flags", nargs="*", help="more run.py flags (after --)")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="pairs-"))
    copies = []
    for index in range(args.runs):
        copy = scratch / "solutions" / f"run{index:02d}.py"
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / args.solution, copy)
        copies.append(copy)
    busy = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.load)]
    for process in busy:
        process.start()
    started = time.monotonic()
    command = [sys.executable, "run.py", "--problem", args.problem, "--device", "cpu"]
    command += [word for copy in copies for word in ("--solution", str(copy))]
    command += ["--results-dir", str(scratch / "results"), "--log-dir", str(scratch / "logs")]
    done = subprocess.run([*command, *args.flags], cwd=ROOT, capture_output=True, text=True)
    seconds = time.monotonic() - started
    for process in busy:
        process.terminate()
    log = scratch / "results" / "cpu" / "runs.jsonl"
    lines = log.read_text().splitlines() if log.exists() else []
    records = [json.loads(line) for line in lines if line.strip()]
    records.sort(key=lambda r: r["solution"])
    rows: dict[str, list[dict]] = {}
    for ran in records:
        for bench in ran.get("benchmarks", []):
            rows.setdefault(bench["name"], []).append(
                {
                    "run": ran["solution"],
                    "load_1m": ran["machine"].get("load_1m"),
                    **bench["speedup"],
                }
            )
    summary = {}
    for shape, seen in rows.items():
        pairs = list(itertools.pairwise(seen))
        apart = [
            (a["run"], b["run"]) for a, b in pairs if a["high"] < b["low"] or b["high"] < a["low"]
        ]
        summary[shape] = {"pairs": len(pairs), "exclusive": len(apart), "which": apart}
    out = {
        "problem": args.problem,
        "solution": args.solution,
        "runs": args.runs,
        "load": args.load,
        "flags": args.flags,
        "exit": done.returncode,
        "seconds": round(seconds, 1),
        "commit": subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
        "cpus": os.cpu_count(),
        "summary": summary,
        "rows": rows,
    }
    args.json.write_text(json.dumps(out, indent=1))
    for shape, counts in summary.items():
        print(f"{shape}: {counts['exclusive']} of {counts['pairs']} pairs exclude each other")
    if done.returncode not in (0, 1):
        print(done.stdout[-2000:], done.stderr[-2000:])
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
