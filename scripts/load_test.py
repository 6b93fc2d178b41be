"""The load test: a generated suite of KernelBench problems swept by run.py, every verdict
checked against the one known in advance, and the throughput reported.

    python scripts/load_test.py OUT [--count 100] [--gpus all] [--kill-after K] [-- RUN FLAGS]

1. Writes the suite into OUT (scripts/make_suite.py), unless OUT/expected.json is there.
2. Sweeps it: `run.py --problems OUT/problems --solutions OUT/solutions`, its results in
   OUT/results-LABEL and its builds in OUT/builds (shared by every sweep of OUT, unless
   --fresh-builds), with --gpus and the RUN FLAGS after `--`.
3. With --kill-after K: kills the sweep (SIGKILL, the harness and its workers at once) once K
   records are in, then runs it again with --resume to the end.
4. Checks the records (scripts/check_sweep.py): each solution recorded exactly once, with the
   status expected on this device; and prints problems judged per hour of wall time.

Exit status: 0 when every check passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOG_NAME = "runs.jsonl"
POLL_S = 0.2


def sweep_command(out: Path, label: str, args: argparse.Namespace) -> list[str]:
    builds = out / (f"builds-{label}" if args.fresh_builds else "builds")
    command = [
        sys.executable,
        str(ROOT / "run.py"),
        "--problems",
        str(out / "problems"),
        "--solutions",
        str(out / "solutions"),
        "--results-dir",
        str(out / f"results-{label}"),
        "--log-dir",
        str(out / f"logs-{label}"),
        "--build-dir",
        str(builds),
    ]
    if args.gpus:
        command += ["--gpus", args.gpus]
    return command + args.run_flags


def records_in(results: Path) -> int:
    return sum(log.read_text().count("\n") for log in results.glob(f"*/{LOG_NAME}"))


def killed_midway(command: list[str], results: Path, after: int) -> int:
    """Start the sweep, kill it once `after` records are in; the records it left."""
    sweep = subprocess.Popen(command, cwd=ROOT, start_new_session=True)
    while records_in(results) < after:
        if sweep.poll() is not None:
            raise SystemExit(f"the sweep ended (exit {sweep.returncode}) before {after} records")
        time.sleep(POLL_S)
    os.killpg(sweep.pid, signal.SIGKILL)
    sweep.wait()
    return records_in(results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the suite's folder (written if it has none)")
    parser.add_argument("--count", type=int, default=100, help="problems in a new suite")
    parser.add_argument(
        "--sizes", default="default", help="a new suite's input sizes: default or level1"
    )
    parser.add_argument("--gpus", help="run.py --gpus (default: run.py's device alone)")
    parser.add_argument("--label", default="sweep", help="names this sweep's results folder")
    parser.add_argument("--kill-after", type=int, metavar="K", help="kill after K records")
    parser.add_argument("--fresh-builds", action="store_true", help="a build folder of its own")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    argv = sys.argv[1:] if argv is None else argv
    ours, run_flags = (
        (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    )
    args = parser.parse_args(ours)
    args.run_flags = run_flags
    out = args.out.resolve()
    if not (out / "expected.json").exists():
        make = [sys.executable, str(ROOT / "scripts" / "make_suite.py"), str(out)]
        subprocess.run([*make, "--count", str(args.count), "--sizes", args.sizes], check=True)
    expected = json.loads((out / "expected.json").read_text())
    results = out / f"results-{args.label}"
    command = sweep_command(out, args.label, args)
    started = time.monotonic()
    left = None
    if args.kill_after:
        left = killed_midway(command, results, args.kill_after)
        print(f"load test: killed the sweep with {left} record(s) in; resuming", flush=True)
        command.append("--resume")
    code = subprocess.run(command, cwd=ROOT).returncode
    seconds = time.monotonic() - started
    (folder,) = [log.parent for log in results.glob(f"*/{LOG_NAME}")]
    check = [sys.executable, str(ROOT / "scripts" / "check_sweep.py"), str(folder)]
    checked = subprocess.run([*check, str(out / "expected.json")], cwd=ROOT).returncode
    problems = expected["problems"]
    figures = {
        "label": args.label,
        "problems": problems,
        "solutions": len(expected["solutions"]),
        "gpus": args.gpus,
        "seconds": round(seconds, 1),
        "problems_per_hour": round(problems / seconds * 3600, 1),
        "killed_with": left,
        "sweep_exit": code,
        "check_exit": checked,
    }
    print(
        f"load test {args.label}: {problems} problems in {seconds:.0f} s wall, "
        f"{figures['problems_per_hour']:.0f} problems/hour; records "
        f"{'as expected' if checked == 0 else 'NOT as expected'}"
    )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0 if checked == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
