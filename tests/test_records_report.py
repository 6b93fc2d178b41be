"""The run log, atomic writes, and tables rendered from stored records only."""

import json
import multiprocessing
import os
import stat
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from harness import codec, record
from harness.record import BenchRow, Measurement, RunRecord
from harness.results import console, rendering, report
from tests import records_factory as make

INPUTS = ("float32[512,1024]", "int64[512,1024]")


def timed(median: float, ref: float, name: str = "default") -> BenchRow:
    """A row whose sides' middle halves span 10% of their medians."""

    def m(value: float) -> Measurement:
        return Measurement((0.9 * value, value, 1.1 * value), "cuda_events")

    return BenchRow(name, INPUTS, m(ref), m(median))


def run(
    solution: str,
    status: str = "ok",
    when: str = "2026-11-29T10:00:00+00:00",
    benchmarks: list[BenchRow] | None = None,
    path: str | None = None,
    detail: str = "",
) -> RunRecord:
    return make.record("p", solution, benchmarks, status, "r1", when=when, path=path, detail=detail)


def test_append_then_read_keeps_order_and_skips_a_torn_line(tmp_path: Path, capsys) -> None:
    first, third = run("a"), run("c", benchmarks=[timed(10.0, 20.0)])
    record.append(tmp_path, first)
    with open(tmp_path / record.LOG_NAME, "a") as log:
        log.write('{"n": 2, "torn')  # a writer killed mid-line
        log.write("\n")
    record.append(tmp_path, third)
    assert record.read(tmp_path) == [first, third]
    assert "skipped 1 unreadable line" in capsys.readouterr().err


def test_a_line_that_is_not_a_record_is_skipped_with_a_warning(tmp_path: Path, capsys) -> None:
    codec.append(tmp_path, {"problem": "p", "status": "ok"}, record.LOG_NAME)
    record.append(tmp_path, run("a"))
    assert [r.solution for r in record.read(tmp_path)] == ["a"]
    assert "skipped 1 line(s) that are not records" in capsys.readouterr().err


def test_a_record_reads_back_equal_to_the_one_written(tmp_path: Path) -> None:
    written = run("a", benchmarks=[make.bench(10.0, 30.0), make.bench(5.0, 9.0, "big")])
    record.append(tmp_path, written)
    (read,) = record.read(tmp_path)
    assert read == written
    assert read.settings == written.settings and read.benchmarks[1].name == "big"


def test_the_shares_of_device_time_are_written_only_where_measured(tmp_path: Path) -> None:
    cpu = run("cpu")  # no kernels profiled: no shares, and no keys for them
    assert cpu.own_share is None and "own_share" not in codec.encode(cpu)
    gpu = replace(run("gpu", benchmarks=[timed(10.0, 20.0)]), own_share=0.9, reference_share=0.0)
    leaf = replace(run("leaf", status="rejected"), own_share=0.25, reference_share=0.75)
    for written in (cpu, gpu, leaf):
        record.append(tmp_path, written)
    assert record.read(tmp_path) == [cpu, gpu, leaf]
    assert codec.encode(gpu)["own_share"] == 0.9 and codec.encode(gpu)["reference_share"] == 0.0
    _, csv_path = report.write_tables(tmp_path, "p", [cpu, gpu, leaf])
    frame = pd.read_csv(csv_path).set_index("solution")
    assert pd.isna(frame.loc["cpu", "own_share"]) and pd.isna(frame.loc["cpu", "reference_share"])
    assert (frame.loc["gpu", "own_share"], frame.loc["gpu", "reference_share"]) == (0.9, 0.0)
    assert (frame.loc["leaf", "own_share"], frame.loc["leaf", "reference_share"]) == (0.25, 0.75)


def test_write_atomic_replaces_whole_or_not_at_all(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "table.md"
    codec.write_atomic(path, "old")
    codec.write_atomic(path, "new")
    assert path.read_text() == "new"

    def failing_replace(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError):
        codec.write_atomic(path, "newer")
    assert path.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["table.md"]  # no temporary file left


def test_written_files_get_the_usual_permissions(tmp_path: Path) -> None:
    mask = os.umask(0o022)
    try:
        codec.write_atomic(tmp_path / "table.md", "text")
    finally:
        os.umask(mask)
    assert stat.S_IMODE((tmp_path / "table.md").stat().st_mode) == 0o644


def _append_many(folder: str, writer: int) -> None:
    for n in range(40):
        record.append(Path(folder), run(f"w{writer}-{n}", detail="x" * 2000))


def test_concurrent_runs_append_whole_lines(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_append_many, args=(str(tmp_path), w)) for w in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    lines = (tmp_path / record.LOG_NAME).read_text().splitlines()
    assert len(lines) == 120
    assert all(json.loads(line)["detail"] == "x" * 2000 for line in lines)
    assert len(record.read(tmp_path)) == 120


def test_latest_record_of_each_solution_wins() -> None:
    old = run("a", status="incorrect", when="2026-11-28T10:00:00+00:00")
    new = run("a", benchmarks=[timed(10.0, 20.0)], when="2026-11-29T10:00:00+00:00")
    other_problem = make.record("q", "b")
    latest = report.latest_per_solution([old, new, other_problem], "p")
    assert latest == [new]


def test_rows_one_per_benchmark_or_one_for_a_failure() -> None:
    ok = run("fast", benchmarks=[timed(10.0, 25.0), timed(100.0, 150.0, name="big")])
    failed = run("broken", status="compile_error", detail="main.cu(3): error: x")
    rows = report.table_rows([ok, failed])
    assert [(r.solution, r.shape, r.status) for r in rows] == [
        ("fast", "512x1024", "ok"),
        ("fast", "big", "ok"),
        ("broken", "-", "compile_error"),
    ]
    assert rows[0].speedup == pytest.approx(2.5) and rows[1].speedup == pytest.approx(1.5)
    assert rows[0].iqr_pct == pytest.approx(10.0)
    assert report.notes(rows[2]) == "main.cu(3): error: x (log: logs/r1/broken.log)"


def test_same_named_solutions_from_two_folders_are_told_apart() -> None:
    rows = report.table_rows([run("mine"), run("mine", path="/home/me/mine.py")])
    assert {r.solution for r in rows} == {"solutions/p/mine.py", "/home/me/mine.py"}


def test_tables_render_from_the_log_alone(tmp_path: Path) -> None:
    record.append(tmp_path, run("fast", benchmarks=[timed(10.0, 25.0)]))
    record.append(tmp_path, run("slow", status="timeout", detail="check step ran past 300 s"))
    md_path, *_ = rendering.render_problem(tmp_path, "p")
    markdown = md_path.read_text()
    assert markdown.startswith("# p on NVIDIA H200")
    assert "| fast       | 512x1024 | ok" in markdown and "2.50x" in markdown
    assert "timeout" in markdown and "check step ran past 300 s" in markdown
    frame = pd.read_csv(md_path.with_suffix(".csv"))
    assert list(frame["solution"]) == ["fast", "slow"]
    assert frame.loc[0, "speedup"] == pytest.approx(2.5)
    assert frame.loc[1, "detail"] == "check step ran past 300 s"


def test_long_details_are_cut_in_the_markdown_only(tmp_path: Path) -> None:
    detail = "output: " + "x" * 500
    problem_records = [run("wrong", status="incorrect", detail=detail)]
    md_path, csv_path = report.write_tables(tmp_path, "p", problem_records)
    assert "x" * 200 not in md_path.read_text()
    assert pd.read_csv(csv_path).loc[0, "detail"] == detail


def test_old_rows_without_a_paired_speedup_show_the_ratio_of_medians_without_interval() -> None:
    old = replace(timed(10.0, 25.0), speedup=None)
    (row,) = report.table_rows([run("old", benchmarks=[old])])
    assert row.speedup == pytest.approx(2.5)
    assert row.speedup_low is None and row.speedup_high is None
    line = report.markdown_table([row]).splitlines()[2]
    assert "2.50x" in [cell.strip() for cell in line.strip("|").split("|")]


def test_a_side_that_waits_for_the_device_is_flagged_in_the_row() -> None:
    row = timed(10.0, 25.0)
    waits = replace(row, solution=replace(row.solution, synchronizes=True))
    (flagged,) = report.table_rows([run("waits", benchmarks=[waits])])
    assert "solution synchronizes with the device" in flagged.flags
    assert "reference synchronizes" not in flagged.flags
    (plain,) = report.table_rows([run("plain", benchmarks=[row])])
    assert "synchronizes" not in plain.flags


def test_a_progress_line_labels_both_sides_and_formats_times_as_the_table() -> None:
    from harness.run.session import summary

    line = summary(run("fast", benchmarks=[timed(20000.0, 24600.0), timed(9.7, 20.4, "small")]))
    assert "512x1024: solution 20,000 us vs eager 24,600 us (1.23x" in line
    assert "small: solution 9.70 us vs eager 20.4 us (2.10x" in line
    assert "e+" not in line


def test_a_small_bandwidth_is_shown_with_its_digits_not_as_zero() -> None:
    # A CPU-timed row moves well under 1 GB/s; it has no copy ceiling, so no 'of copy'.
    slow = replace(timed(10_000.0, 25_000.0), bytes=4_120_000)  # 0.412 GB/s
    fast = replace(timed(10.0, 25.0), bytes=25_000_000)  # 2,500 GB/s
    on_cpu = make.record("p", "slow", [slow], device="cpu")
    rows = report.table_rows([on_cpu, run("fast", benchmarks=[fast])])
    cells = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in report.markdown_table(rows).splitlines()[2:]
    ]
    at = list(report.COLUMNS).index
    assert cells[0][at("gbps")] == "0.412" and cells[0][at("ceiling_pct")] == ""
    assert cells[1][at("gbps")] == "2,500"


def test_the_console_table_gives_every_note_in_full_within_its_width() -> None:

    long = "case 'beta=0.5', seed 1234: 17 of 4096 elements differ; max abs err 0.25 at (3, 7)"
    failed = make.record("p", "wrong", status="incorrect", detail=long)
    good = make.record("p", "good", [make.bench(10.0, 20.0)])
    text = console.compact("p", [good, failed], None)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= console.WIDTH
    assert lines[-1] == f"[1] {long}"  # below the table, whole
    assert next(line for line in lines if line.startswith("wrong")).rstrip().endswith("[1]")
    assert "..." not in text
