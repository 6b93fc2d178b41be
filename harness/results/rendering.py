"""Render everything a results folder shows from its recorded files: per problem its table
(markdown and CSV) and chart, and the summary across problems. Needs no GPU."""

from __future__ import annotations

from pathlib import Path

from harness import files
from harness.results import charts, report, summary


def render_problem(folder: Path, problem: str) -> Path:
    """The problem's chart (when matplotlib is installed) and tables; returns the table."""
    chart = charts.write_chart(folder, problem)
    markdown, _ = report.write_tables(folder, problem, chart.name if chart else None)
    return markdown


def render_folder(folder: Path) -> list[Path]:
    """Every problem recorded in `folder`, then its summary; returns the files written."""
    problems = sorted({r["problem"] for r in files.read(folder) if "problem" in r})
    written = [render_problem(folder, problem) for problem in problems]
    return [*written, summary.write_summary(folder)]
