"""Check a sweep's recorded verdicts against a load-test suite's expected.json
(scripts/make_suite.py).

    python scripts/check_sweep.py RESULTS_FOLDER EXPECTED_JSON [--device cpu|cuda] [--run-id ID ...]

RESULTS_FOLDER is a machine's folder of results (results/cpu, say): its runs.jsonl is read as
the harness reads it (a removal line of run.py --forget drops the earlier records of its
solution), narrowed to the runs given (a run id or the start of one). Checked: every expected
solution ("<problem>/<solution stem>") has exactly one record, nothing else is recorded, and each
status is the one expected on the device (by default the one the records name, cpu without a
GPU). Printed: per status, how many were expected and how many recorded; then each problem
found. Exit status 0 when all holds; 1 for a missing, duplicate, unexpected or mismatching record;
2 for unusable arguments (no log, records from both kinds of device without --device).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import codec, verdicts
from harness.record import FORGET, LOG_NAME

DEVICES = ("cpu", "cuda")
EXIT_OK, EXIT_MISMATCH, EXIT_USAGE = 0, 1, 2


@dataclass(frozen=True)
class Seen:
    """One recorded verdict: the fields of a record that the check reads."""

    problem: str
    solution: str  # the file's stem
    status: str
    run_id: str
    device: str | None  # "cpu" or "cuda" from the record's machine; None where it has none
    path: str | None  # the solution's path, which a removal line names
    check_only: bool  # run with --check-only: not timed, so not profiled either

    @property
    def key(self) -> str:
        """'<problem>/<solution stem>', as expected.json names it."""
        return f"{self.problem}/{self.solution}"


@dataclass(frozen=True)
class Findings:
    """What the check found wrong, each entry a line to print."""

    missing: list[str]
    duplicates: list[str]
    unexpected: list[str]
    mismatches: list[str]

    @property
    def failed(self) -> bool:
        return any((self.missing, self.duplicates, self.unexpected, self.mismatches))


def read_seen(folder: Path) -> list[Seen]:
    """The records of the folder's run log, oldest first, less those a later removal line
    dropped: harness.record.read's rule, applied to the few fields read here, so a record of
    any age counts (a line without problem, solution or status is skipped with a warning)."""
    seen: list[Seen] = []
    skipped = 0
    for data in codec.read(folder, LOG_NAME):
        if data.get("kind") == FORGET:
            gone = (data.get("problem"), data.get("solution_path"))
            seen = [s for s in seen if (s.problem, s.path) != gone]
            continue
        if not all(isinstance(data.get(k), str) for k in ("problem", "solution", "status")):
            skipped += 1
            continue
        seen.append(_seen(data))
    if skipped:
        print(f"warning: {folder / LOG_NAME}: skipped {skipped} line(s) that are not records")
    return seen


def _seen(data: dict[str, Any]) -> Seen:
    machine = data.get("machine") or {}
    device = machine.get("device") if isinstance(machine, dict) else None
    checking = (data.get("settings") or {}).get("checking") or {}
    return Seen(
        problem=data["problem"],
        solution=data["solution"],
        status=data["status"],
        run_id=str(data.get("run_id", "")),
        device=None if device is None else str(device).split(":")[0],
        path=data.get("solution_path"),
        check_only=bool(checking.get("check_only")),
    )


def chosen_runs(seen: list[Seen], run_ids: list[str] | None) -> list[Seen]:
    """The records of the runs whose ids start with one of `run_ids`; all where None."""
    if not run_ids:
        return seen
    return [s for s in seen if any(s.run_id.startswith(run) for run in run_ids)]


def pick_device(seen: list[Seen], given: str | None) -> str:
    """`given`, else the one device the records name (cpu where they name none); ValueError
    when they name both."""
    if given:
        return given
    named = {s.device for s in seen if s.device is not None}
    if len(named) > 1:
        raise ValueError(f"the records come from {' and '.join(sorted(named))}: pass --device")
    return named.pop() if named else "cpu"


def wanted_status(entry: dict[str, str], check_only: bool, device: str) -> str:
    """The status `entry` expects on `device`: a cpu_ok solution checked with --check-only on a
    GPU is never profiled, so `ok` instead of `rejected`."""
    if check_only and device == "cuda" and entry["kind"] == "cpu_ok":
        return verdicts.OK
    return entry[device]


def compare(expected: dict[str, dict[str, str]], seen: list[Seen], device: str) -> Findings:
    """Every expected solution once, nothing else, each with its expected status."""
    counts = Counter(s.key for s in seen)
    mismatches = [
        f"{s.key}: {s.status}, expected {wanted} (run {s.run_id})"
        for s in seen
        if s.key in expected
        and s.status != (wanted := wanted_status(expected[s.key], s.check_only, device))
    ]
    return Findings(
        missing=[key for key in expected if key not in counts],
        duplicates=[
            f"{key}: {n} records" for key, n in counts.items() if n > 1 and key in expected
        ],
        unexpected=sorted({s.key for s in seen if s.key not in expected}),
        mismatches=mismatches,
    )


def status_table(expected: dict[str, dict[str, str]], seen: list[Seen], device: str) -> str:
    """Per status: how many solutions expected it and how many records of expected solutions
    have it (a status nobody expected shows too)."""
    check_only = any(s.check_only for s in seen)
    wanted = Counter(wanted_status(entry, check_only, device) for entry in expected.values())
    got = Counter(s.status for s in seen if s.key in expected)
    rows = [(name, wanted[name], got[name]) for name in sorted(set(wanted) | set(got))]
    rows.append(("total", sum(wanted.values()), sum(got.values())))
    width = max(len(name) for name, _, _ in rows)
    lines = [f"{'status':<{width}}  expected  got"]
    lines += [f"{name:<{width}}  {w:>8}  {g:>3}" for name, w, g in rows]
    return "\n".join(lines)


def report(findings: Findings) -> str:
    """One line per problem found, under a heading per kind of problem."""
    parts = []
    for title, lines in (
        ("missing (no record)", findings.missing),
        ("recorded more than once", findings.duplicates),
        ("not in the suite", findings.unexpected),
        ("wrong status", findings.mismatches),
    ):
        if lines:
            parts.append(f"{title}: {len(lines)}")
            parts += [f"  {line}" for line in lines]
    return "\n".join(parts)


def load_expected(path: Path) -> dict[str, dict[str, str]]:
    """expected.json's solutions: '<problem>/<solution stem>' -> {kind, cpu, cuda}."""
    solutions = json.loads(path.read_text(encoding="utf-8"))["solutions"]
    if not isinstance(solutions, dict):
        raise ValueError(f"{path}: 'solutions' is not a mapping")
    return solutions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("results", type=Path, help="a machine's results folder (has runs.jsonl)")
    parser.add_argument("expected", type=Path, help="the suite's expected.json")
    parser.add_argument("--device", choices=DEVICES, help="default: the records' device")
    parser.add_argument(
        "--run-id",
        action="extend",
        nargs="+",
        metavar="ID",
        dest="run_ids",
        help="only the records of these runs (an id or the start of one; repeatable)",
    )
    args = parser.parse_args(argv)
    if not (args.results / LOG_NAME).is_file():
        held = sorted(str(p.parent) for p in args.results.glob(f"*/{LOG_NAME}"))
        hint = f" (a machine's folder: {', '.join(held)})" if held else ""
        print(f"error: {args.results / LOG_NAME} does not exist{hint}", file=sys.stderr)
        return EXIT_USAGE
    try:
        expected = load_expected(args.expected)
        seen = chosen_runs(read_seen(args.results), args.run_ids)
        device = pick_device(seen, args.device)
    except (OSError, ValueError, KeyError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    findings = compare(expected, seen, device)
    print(f"{len(seen)} record(s) against {len(expected)} expected, on {device}")
    print(status_table(expected, seen, device))
    if device == "cuda" and any(s.check_only for s in seen):
        print("note: records made with --check-only: cpu_ok is not profiled, so ok, not rejected")
    if findings.failed:
        print(report(findings))
        return EXIT_MISMATCH
    print("every expected solution recorded once, each with its expected status")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
