"""A results folder re-rendered from its run log: each problem's tables (markdown and CSV) and
chart, the summary across problems, and the page (index.html). Needs no GPU.

Each render holds the folder's lock and reads its run log once, then hands the records to the
chart, the tables, the summary and the page: a run that appends meanwhile waits, so no file mixes
two versions of the log, and the last render to finish shows every record."""

from __future__ import annotations

from pathlib import Path

from harness import codec, record
from harness.record import RunRecord
from harness.results import chart, page, report, summary


def render_problem(folder: Path, problem: str) -> list[Path]:
    """The problem's tables and chart (when matplotlib is installed); returns the files
    written, the markdown table first (none, the old ones removed, when no row is left)."""
    return render_problems(folder, [problem])


def render_problems(folder: Path, problems: list[str]) -> list[Path]:
    """`render_problem` for each of `problems`, reading the run log once (a sweep's tables,
    made at its end: one read per problem would grow with the log, quadratic in a sweep)."""
    with codec.locked(folder):
        records = record.read(folder)
        return [path for problem in problems for path in _problem(folder, problem, records)]


def render_summary(folder: Path) -> tuple[Path, list[RunRecord]]:
    """The summary across the folder's problems; returns its path, and the records it was
    made from (the run log read once)."""
    with codec.locked(folder):
        records = record.read(folder)
        return _summary_and_page(folder, records)[0], records


def render_folder(folder: Path) -> tuple[list[Path], list[RunRecord]]:
    """Every problem recorded in `folder`, then its summary; returns the files written, and
    the records they were made from (the run log read once)."""
    with codec.locked(folder):
        records = record.read(folder)
        problems = sorted({r.problem for r in records})
        written = [path for problem in problems for path in _problem(folder, problem, records)]
        return [*written, *_summary_and_page(folder, records)], records


def _problem(folder: Path, problem: str, records: list[RunRecord]) -> list[Path]:
    if not any(r.problem == problem for r in records):  # every row forgotten (run.py --forget)
        for suffix in (".md", ".csv", ".svg"):
            (folder / f"{problem}{suffix}").unlink(missing_ok=True)
        return []
    drawn = chart.write_chart(folder, problem, records)
    markdown, table = report.write_tables(folder, problem, records, drawn.name if drawn else None)
    return [markdown, table, *([drawn] if drawn else [])]


def _summary_and_page(folder: Path, records: list[RunRecord]) -> tuple[Path, Path]:
    """summary.md and index.html from `records`; their paths."""
    return summary.write_summary(folder, records), page.write_page(folder, records)
