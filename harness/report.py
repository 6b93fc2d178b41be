"""Render result tables from recorded runs; reads only the records, so it works without a GPU.

A problem's table holds the latest record of each solution (by path), one row per benchmark,
or one row carrying the verdict where the solution did not reach timing.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pandas as pd
from tabulate import tabulate

from harness import records

NOTES_CHARS = 120  # a markdown cell longer than this is cut; the CSV keeps it whole
COLUMNS = {  # column: header in the markdown table
    "solution": "solution",
    "shape": "shape",
    "status": "status",
    "median_us": "time (us)",
    "iqr_pct": "IQR",
    "n": "n",
    "ref_median_us": "reference (us)",
    "speedup": "speedup",
    "when": "run (UTC)",
    "notes": "notes",  # detail and log, see notes()
}

CSV_COLUMNS = [c for c in COLUMNS if c != "notes"] + [
    "ref_iqr_pct",
    "detail",
    "log",
    "solution_path",
    "run_id",
]


def latest_per_solution(all_records: list[dict[str, Any]], problem: str) -> list[dict[str, Any]]:
    """The newest record of each solution (keyed by path) of `problem`, sorted by name."""
    latest: dict[str, dict[str, Any]] = {}
    for record in all_records:
        if record.get("problem") == problem:
            latest[record["solution_path"]] = record
    return sorted(latest.values(), key=lambda r: r["solution"])


def table_rows(problem_records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (solution, benchmark); a solution that did not reach timing gets one row."""
    stems = [record["solution"] for record in problem_records]
    rows = []
    for record in problem_records:
        # Two files of the same name from different folders are told apart by their paths.
        unique = stems.count(record["solution"]) == 1
        base = {
            "solution": record["solution"] if unique else record["solution_path"],
            "status": record["status"],
            "when": _short_time(record.get("time")),
            "detail": record.get("detail") or _device_note(record),
            "log": record.get("log"),
            "solution_path": record["solution_path"],
            "run_id": record.get("run_id"),
        }
        benchmarks = record.get("benchmarks") or []
        if not benchmarks:
            rows.append({**base, "shape": "-"})
        for bench in benchmarks:
            rows.append({**base, **_timing_columns(bench)})
    return rows


def _timing_columns(bench: dict[str, Any]) -> dict[str, Any]:
    solution, reference = bench["solution"], bench["reference"]
    return {
        "shape": bench_label(bench),
        "median_us": solution["median_us"],
        "iqr_pct": 100 * solution["iqr_us"] / solution["median_us"],
        "n": solution["count"],
        "ref_median_us": reference["median_us"],
        "ref_iqr_pct": 100 * reference["iqr_us"] / reference["median_us"],
        "speedup": reference["median_us"] / solution["median_us"],
    }


def bench_label(bench: dict[str, Any]) -> str:
    """'512x1024' for the default benchmark (its first tensor's shape), else its own name."""
    if bench["name"] != "default":
        return str(bench["name"])
    for described in bench.get("inputs", []):
        if "[" in described:
            return described.split("[", 1)[1].rstrip("]").replace(",", "x") or "scalar"
    return "default"


def _device_note(record: dict[str, Any]) -> str:
    ran_on = record.get("device", "")
    if ran_on == "cpu" and record.get("machine", {}).get("gpu"):
        return "C++ solution: checked and timed on the CPU, against the reference on the CPU"
    return ""


def notes(row: dict[str, Any]) -> str:
    """The detail, cut to NOTES_CHARS, and the log's path where the solution failed."""
    text = row.get("detail") or ""
    if len(text) > NOTES_CHARS:
        text = text[: NOTES_CHARS - 3].rstrip() + "..."
    if row["status"] != "ok" and row.get("log"):
        text = f"{text} (log: {row['log']})" if text else f"log: {row['log']}"
    return text


def _short_time(stamp: str | None) -> str:
    if not stamp:
        return ""
    moment = datetime.datetime.fromisoformat(stamp).astimezone(datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M")


def markdown_table(rows: list[dict[str, Any]]) -> str:
    shown = [[_format(column, row.get(column)) for column in COLUMNS] for row in rows]
    for line, row in zip(shown, rows, strict=True):
        line[-1] = notes(row)
    return tabulate(shown, headers=list(COLUMNS.values()), tablefmt="github", disable_numparse=True)


def _format(column: str, value: Any) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return ""
    if column in ("median_us", "ref_median_us"):
        return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 1000 else f"{value:,.0f}"
    if column == "iqr_pct":
        return f"{value:.1f}%"
    if column == "speedup":
        return f"{value:.2f}x"
    return str(value)


def render_markdown(problem: str, rows: list[dict[str, Any]], machine: dict[str, Any]) -> str:
    where = machine.get("gpu") or f"CPU ({machine.get('cpu')})"
    method = (
        "CUDA events, L2 flushed before every call"
        if machine.get("gpu")
        else "wall clock, caches not flushed"
    )
    env = ", ".join(
        f"{key} {machine[key]}"
        for key in ("torch", "cuda", "driver", "commit")
        if machine.get(key) is not None
    )
    return (
        f"# {problem} on {where}\n\n"
        f"Latest result of each solution. Times are medians ({method}); IQR is the "
        "interquartile range as a share of the median; speedup is the reference's median "
        "over the solution's, both timed in the same process.\n\n"
        f"{markdown_table(rows)}\n\n"
        f"Newest run started {machine.get('time')}, {env}. Raw samples: `{records.LOG_NAME}`.\n"
    )


def write_tables(folder: Path, problem: str) -> tuple[Path, Path]:
    """Re-render `<problem>.md` and `.csv` in `folder` from its run log; returns both paths."""
    with records.locked(folder):
        problem_records = latest_per_solution(records.read(folder), problem)
        rows = table_rows(problem_records)
        newest = max(problem_records, key=lambda r: r.get("time", ""), default={})
        machine = newest.get("machine", {})
        markdown = render_markdown(problem, rows, machine)
        frame = pd.DataFrame(rows, columns=CSV_COLUMNS)
        md_path, csv_path = folder / f"{problem}.md", folder / f"{problem}.csv"
        records.write_atomic(md_path, markdown)
        records.write_atomic(csv_path, frame.to_csv(index=False, float_format="%.6g"))
    return md_path, csv_path
