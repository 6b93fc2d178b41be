"""What a run prints when it ends: a compact table per problem that fits WIDTH columns, with the
path of the full table (harness.results.report writes that one, 200 and more columns wide).

One line per (solution, shape) of this run's records: status, time, eager's time and the
speedup with its interval, and its notes: a failed solution's detail, a shape's flags. A note
too long for the line is given in full below the table, as a numbered footnote: nothing is cut.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from tabulate import tabulate

from harness import verdicts
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
    footnotes: list[str] = []
    for line in lines:
        if len(line[-1]) > room:
            footnotes.append(f"[{len(footnotes) + 1}] {line[-1]}")
            line[-1] = f"[{len(footnotes)}]"
    fitted = tabulate(lines, headers=HEADERS, tablefmt="simple", disable_numparse=True).splitlines()
    fitted += [textwrap.fill(note, WIDTH, subsequent_indent="    ") for note in footnotes]
    where = f"\nfull table: {table}" if table else ""
    return f"{problem}:\n" + "\n".join(fitted) + where


def _lines(record: RunRecord) -> list[list[str]]:
    """A line per timed shape, or one line with the detail where nothing was timed."""
    if not record.benchmarks:
        return [[record.solution, "-", record.status, "", "", "", record.detail]]
    return [_timed(record, bench) for bench in record.benchmarks]


def _timed(record: RunRecord, bench: BenchRow) -> list[str]:
    row = report.bench_row(record, bench)  # the full table's own cells, fewer of them
    note = row.flags or ""
    return [
        record.solution,
        report.bench_label(bench),
        record.status,
        report.format_us(bench.solution.median_us),
        report.format_us(bench.reference.median_us),
        report._ratio_cell(vars(row), "speedup"),
        note if record.status == verdicts.OK else record.detail,
    ]
