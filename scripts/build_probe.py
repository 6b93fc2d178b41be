"""One build, stage by stage: a solution's CUDA unit compiled as the harness compiles it (against
the lightest header it compiles with where it includes <torch/extension.h>: ATen's operator
headers or <torch/types.h>, harness/measure/builds.py), against <torch/types.h> alone, and as
written, each in a fresh build folder, one after the other.

    python scripts/build_probe.py PROBLEM SOLUTION [--pch-dir DIR] [--way light|types|as written]

For each way: run.py --build-only's own "built in" line and its whole time, then each step of
the build's ninja log (main.o, cuda.cuda.o, the link), in seconds, and within the CUDA unit
each phase of nvcc (`nvcc --time`, given through NVCC_APPEND_FLAGS so that the build's own
commands are unchanged): the host preprocessing, cudafe++, cicc (the device front and middle
end), ptxas, and the host compiler on what cudafe++ left. Run it with nothing else
on the machine. The sandbox is off (its own cost is in docs/anticheat.md). --pch-dir shares a
folder of precompiled headers made already (a sweep's `<build cache>/.pch`), so main.cpp
compiles as in a sweep; without it, every build starts without one.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WAYS = {"light": "1", "types": "types", "as written": "0"}  # HARNESS_LIGHT_HEADER


def ninja_steps(build_dir: Path) -> list[tuple[str, float]]:
    """Each step of every ninja log under `build_dir`: its output and seconds."""
    steps = []
    for log in sorted(build_dir.rglob(".ninja_log")):
        for line in log.read_text().splitlines()[1:]:
            start, end, _, output, _ = line.split("\t")
            steps.append((output, (int(end) - int(start)) / 1000))
    return steps


def nvcc_phases(csv: Path) -> dict[str, float]:
    """Seconds per nvcc phase, summed over every unit `nvcc --time` wrote to `csv`."""
    phases: dict[str, float] = {}
    rows = csv.read_text().splitlines()[1:] if csv.exists() else []
    for row in rows:
        cells = [cell.strip() for cell in row.split(",")]
        if len(cells) >= 8 and cells[7] == "ms" and cells[1] != "nvcc (driver)":
            phases[cells[1]] = phases.get(cells[1], 0.0) + float(cells[6]) / 1000
    return phases


def probe(problem: str, solution: str, way: str, pch_dir: str | None) -> None:
    env = dict(os.environ, HARNESS_LIGHT_HEADER=WAYS[way])
    if pch_dir:
        env["HARNESS_PCH_DIR"] = pch_dir
    with tempfile.TemporaryDirectory(prefix="probe-") as scratch:
        timed = Path(scratch) / "nvcc-time.csv"
        env["NVCC_APPEND_FLAGS"] = f"{env.get('NVCC_APPEND_FLAGS', '')} --time {timed}".strip()
        command = [sys.executable, str(REPO / "run.py"), "--problem", problem]
        command += ["--solution", solution, "--build-only", "--no-record", "--compile-cuda"]
        command += ["--build-dir", scratch, "--log-dir", scratch, "--sandbox", "off"]
        started = time.monotonic()
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        whole = time.monotonic() - started
        built = [line for line in done.stdout.splitlines() if " in " in line and "built" in line]
        print(f"{way}: run.py {whole:.1f} s, exit {done.returncode}")
        for line in built[:3]:
            print(f"  {line.strip()}")
        for output, seconds in ninja_steps(Path(scratch)):
            print(f"  {output}: {seconds:.1f} s")
        for phase, seconds in nvcc_phases(timed).items():
            print(f"    nvcc {phase}: {seconds:.1f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("problem", help="the problem (a file or folder, as --problem takes)")
    parser.add_argument("solution", help="the solution file")
    parser.add_argument("--pch-dir", help="a folder of precompiled headers made already")
    parser.add_argument("--way", choices=[*WAYS, "all"], default="all", help="default: all")
    args = parser.parse_args(argv)
    for way in WAYS if args.way == "all" else [args.way]:
        probe(args.problem, args.solution, way, args.pch_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
