"""The run log, atomic writes, and tables rendered from stored records only."""

import json
import multiprocessing
import os
import stat
from pathlib import Path

import pandas as pd
import pytest

from harness import files
from harness.results import report


def timed(median: float, ref: float, name: str = "default") -> dict:
    def m(value: float) -> dict:
        return {
            "method": "cuda_events",
            "count": 3,
            "median_us": value,
            "iqr_us": value / 10,
            "min_us": value,
            "times_us": [value] * 3,
        }

    return {
        "name": name,
        "inputs": ["float32[512,1024]", "int64[512,1024]"],
        "reference": m(ref),
        "solution": m(median),
    }


def record(
    solution: str,
    status: str = "ok",
    when: str = "2026-11-29T10:00:00+00:00",
    benchmarks: list | None = None,
    path: str | None = None,
    detail: str = "",
) -> dict:
    return {
        "problem": "p",
        "solution": solution,
        "solution_path": path or f"solutions/p/{solution}.py",
        "status": status,
        "detail": detail,
        "time": when,
        "run_id": "r1",
        "log": "logs/r1/x.log",
        "benchmarks": benchmarks if benchmarks is not None else [],
        "machine": {"gpu": "NVIDIA H200", "torch": "2.11.0", "time": when},
    }


def test_append_then_read_keeps_order_and_skips_a_torn_line(tmp_path: Path, capsys) -> None:
    files.append(tmp_path, {"n": 1})
    with open(tmp_path / files.LOG_NAME, "a") as log:
        log.write('{"n": 2, "torn')  # a writer killed mid-line
        log.write("\n")
    files.append(tmp_path, {"n": 3})
    assert [r["n"] for r in files.read(tmp_path)] == [1, 3]
    assert "skipped 1 unreadable line" in capsys.readouterr().err


def test_write_atomic_replaces_whole_or_not_at_all(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "table.md"
    files.write_atomic(path, "old")
    files.write_atomic(path, "new")
    assert path.read_text() == "new"

    def failing_replace(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError):
        files.write_atomic(path, "newer")
    assert path.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["table.md"]  # no temporary file left


def test_written_files_get_the_usual_permissions(tmp_path: Path) -> None:
    mask = os.umask(0o022)
    try:
        files.write_atomic(tmp_path / "table.md", "text")
    finally:
        os.umask(mask)
    assert stat.S_IMODE((tmp_path / "table.md").stat().st_mode) == 0o644


def _append_many(folder: str, writer: int) -> None:
    for n in range(40):
        files.append(Path(folder), {"writer": writer, "n": n, "pad": "x" * 2000})


def test_concurrent_runs_append_whole_lines(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_append_many, args=(str(tmp_path), w)) for w in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    lines = (tmp_path / files.LOG_NAME).read_text().splitlines()
    assert len(lines) == 120
    assert all(json.loads(line)["pad"] == "x" * 2000 for line in lines)


def test_latest_record_of_each_solution_wins() -> None:
    old = record("a", status="incorrect", when="2026-11-28T10:00:00+00:00")
    new = record("a", benchmarks=[timed(10.0, 20.0)], when="2026-11-29T10:00:00+00:00")
    other_problem = {**record("b"), "problem": "q"}
    latest = report.latest_per_solution([old, new, other_problem], "p")
    assert latest == [new]


def test_rows_one_per_benchmark_or_one_for_a_failure() -> None:
    ok = record("fast", benchmarks=[timed(10.0, 25.0), timed(100.0, 150.0, name="big")])
    failed = record("broken", status="compile_error", detail="main.cu(3): error: x")
    rows = report.table_rows([ok, failed])
    assert [(r["solution"], r["shape"], r["status"]) for r in rows] == [
        ("fast", "512x1024", "ok"),
        ("fast", "big", "ok"),
        ("broken", "-", "compile_error"),
    ]
    assert rows[0]["speedup"] == pytest.approx(2.5) and rows[1]["speedup"] == pytest.approx(1.5)
    assert rows[0]["iqr_pct"] == pytest.approx(10.0)
    assert report.notes(rows[2]) == "main.cu(3): error: x (log: logs/r1/x.log)"


def test_same_named_solutions_from_two_folders_are_told_apart() -> None:
    rows = report.table_rows([record("mine"), record("mine", path="/home/me/mine.py")])
    assert {r["solution"] for r in rows} == {"solutions/p/mine.py", "/home/me/mine.py"}


def test_tables_render_from_the_log_alone(tmp_path: Path) -> None:
    files.append(tmp_path, record("fast", benchmarks=[timed(10.0, 25.0)]))
    files.append(tmp_path, record("slow", status="timeout", detail="check step ran past 300 s"))
    md_path, csv_path = report.write_tables(tmp_path, "p")
    markdown = md_path.read_text()
    assert markdown.startswith("# p on NVIDIA H200")
    assert "| fast       | 512x1024 | ok" in markdown and "2.50x" in markdown
    assert "timeout" in markdown and "check step ran past 300 s" in markdown
    frame = pd.read_csv(csv_path)
    assert list(frame["solution"]) == ["fast", "slow"]
    assert frame.loc[0, "speedup"] == pytest.approx(2.5)
    assert frame.loc[1, "detail"] == "check step ran past 300 s"


def test_long_details_are_cut_in_the_markdown_only(tmp_path: Path) -> None:
    detail = "output: " + "x" * 500
    files.append(tmp_path, record("wrong", status="incorrect", detail=detail))
    md_path, csv_path = report.write_tables(tmp_path, "p")
    assert "x" * 200 not in md_path.read_text()
    assert pd.read_csv(csv_path).loc[0, "detail"] == detail
