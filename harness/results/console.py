"""What a run prints when it ends: a compact table per problem that fits WIDTH columns, with the
path of the full table (harness.results.report writes that one, 200 and more columns wide).

One line per (solution, shape) of this run's records: status, time, eager's time and the
speedup with its interval; a failed solution's line carries the start of its detail instead,
and a shape with flags says how many (the full table names them).
"""

from __future__ import annotations

from pathlib import Path

from tabulate import tabulate

from harness import status
from harness.record import BenchRow, RunRecord
from harness.results import report

WIDTH = 100
HEADERS = ["solution", "shape", "status", "time (us)", "eager (us)", "speedup [95% CI]", "notes"]


def compact(problem: str, records: list[RunRecord], table: Path | None) -> str:
    """`records` (one run's, of `problem`) as a table within WIDTH columns, then where the full
    table is (none where the run records nothing)."""
    lines = [line for record in records for line in _lines(record)]
    without_notes = tabulate(
        [line[:-1] for line in lines],
        headers=HEADERS[:-1],
        tablefmt="simple",
        disable_numparse=True,
    )
    widest = max(len(row) for row in without_notes.splitlines())
    room = max(WIDTH - widest - 2, len(HEADERS[-1]))
    for line in lines:
        line[-1] = line[-1] if len(line[-1]) <= room else line[-1][: room - 3].rstrip() + "..."
    fitted = tabulate(lines, headers=HEADERS, tablefmt="simple", disable_numparse=True).splitlines()
    where = f"\nfull table: {table}" if table else ""
    return f"{problem}:\n" + "\n".join(fitted) + where


def _lines(record: RunRecord) -> list[list[str]]:
    """A line per timed shape, or one line with the detail where nothing was timed."""
    if not record.benchmarks:
        return [[record.solution, "-", record.status, "", "", "", record.detail]]
    return [_timed(record, bench) for bench in record.benchmarks]


def _timed(record: RunRecord, bench: BenchRow) -> list[str]:
    columns = report._timing_columns(bench, None)  # the full table's own cells, fewer of them
    flags = columns["flags"].count("; ") + 1 if columns["flags"] else 0
    note = f"{flags} flag{'s' * (flags > 1)}" if flags else ""  # named in the full table
    return [
        record.solution,
        report.bench_label(bench),
        record.status,
        report.format_us(bench.solution.median_us),
        report.format_us(bench.reference.median_us),
        report._ratio_cell(columns, "speedup"),
        note if record.status == status.OK else record.detail,
    ]
