"""The committed H200 run log reads as typed records, old lines and new alike, with the values
the committed tables show; every committed machine folder's tables are what its records render."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from harness import codec, record, verdicts
from harness.record import Machine, RunRecord
from harness.results import baselines, comparison, rendering, report, summary
from harness.run import machine
from harness.settings import HARNESS, KERNELBENCH, Checking, Limits, Settings, StopRule
from tests.conftest import REPO

H200 = REPO / "results" / "nvidia-h200"


@pytest.fixture(scope="module")
def records() -> list[RunRecord]:
    return record.read(H200)


@pytest.fixture(scope="module")
def lines() -> list[dict]:
    text = (H200 / "runs.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


ISSUE_5_RUN = "20261129-131410-2b0e8b"  # run.py --all --compile at 6786b02, flat settings
ISSUE_11_RUN = "20261130-200741-a673f8"  # the same at f8defa8, settings recorded whole
ISSUE_12_RUN = "20261130-222451-34f8c4"  # the same at e617aef, with --ncu


def of_run(records: list[RunRecord], run_id: str, problem: str, solution: str) -> RunRecord:
    (found,) = [
        r for r in records if (r.run_id, r.problem, r.solution) == (run_id, problem, solution)
    ]
    return found


def test_every_committed_line_reads_as_a_record(records: list[RunRecord], lines: list) -> None:
    assert len(records) == len(lines) >= 30  # later runs append; none is ever dropped
    assert [r.time for r in records] == [line["time"] for line in lines]


def test_an_issue_5_row_holds_what_its_table_showed(records: list[RunRecord]) -> None:
    fast = of_run(records, ISSUE_5_RUN, "smooth_l1", "fast_cuda")
    assert (fast.run_id, fast.status, fast.checks, fast.cases) == (
        "20261129-131410-2b0e8b",
        verdicts.OK,
        100,
        20,
    )
    assert fast.machine.gpu == "NVIDIA H200" and fast.machine.commit == "6786b02"
    assert fast.settings.checking.secret == 128362707945143
    assert fast.settings.timing.rule == StopRule() and fast.settings.timing.flush == "read"
    assert fast.ceiling is not None and fast.ceiling.copy_gbps == pytest.approx(4244.44, abs=0.01)
    default, big = fast.benchmarks
    assert report.bench_label(default) == "32x64x56x56" and big.name == "128x64x56x56"
    assert default.solution.count == 2000 and default.stop == "cap" and default.spot_checks == 26
    assert default.solution.median_us == pytest.approx(18.336, abs=1e-3)
    assert default.reference.median_us == pytest.approx(135.616, abs=1e-3)
    assert default.speedup is not None and default.speedup.value == pytest.approx(7.3762, abs=1e-4)
    assert default.compile is not None and default.compile.cached is True
    assert default.vs_compile is not None and default.vs_compile.low == pytest.approx(
        1.00697, abs=1e-5
    )
    assert big.bytes == 205520900 and big.solution.count == 20
    assert summary.score(fast) == pytest.approx(8.46, abs=0.005)


def test_new_records_write_back_the_json_they_were_read_from(
    records: list[RunRecord], lines: list
) -> None:
    """Every key but `settings` (recorded whole now, not in the old flat form) round-trips."""
    issue_5 = [r for r in records if r.run_id == ISSUE_5_RUN]
    assert len(issue_5) == 6
    for read in issue_5:
        (line,) = [d for d in lines if (d["time"], d["solution"]) == (read.time, read.solution)]
        written = codec.encode(read)
        assert written.pop("settings") == codec.encode(read.settings)
        assert written == {k: v for k, v in line.items() if k != "settings"}


# Settings added since those records were written: they read with their defaults.
SETTINGS_ADDED = {"ncu": False, "compile_cuda": False, "strict_audit": False}  # 12, 15, 43
CHECKING_ADDED = {  # issues 15 and 21
    "case": None,
    "check_only": False,
    "profile": "harness",
    "kernelbench_tolerance": None,
    "kernelbench_trials": None,
    "precision": None,  # issue 60
}


LIMITS_ADDED = {  # issue 26
    "sandbox": Limits().sandbox,
    "memory_gb": Limits().memory_gb,
    "max_processes": Limits().max_processes,
}


def test_records_with_whole_settings_write_back_exactly(
    records: list[RunRecord], lines: list
) -> None:
    issue_11 = [r for r in records if r.run_id == ISSUE_11_RUN]
    assert len(issue_11) == 6
    for read in issue_11:
        (line,) = [d for d in lines if (d["time"], d["solution"]) == (read.time, read.solution)]
        settings = {**line["settings"], **SETTINGS_ADDED}
        settings["checking"] = {**settings["checking"], **CHECKING_ADDED}
        settings["limits"] = {**settings["limits"], **LIMITS_ADDED}
        assert codec.encode(read) == {**line, "settings": settings}
    fast = of_run(records, ISSUE_11_RUN, "smooth_l1", "fast_cuda")
    assert fast.machine.commit == "f8defa8" and fast.settings.timing.compile is True
    assert fast.settings.checking.secret > 0 and fast.settings.device == "cuda:0"


def test_the_oldest_records_read_with_none_where_a_key_did_not_exist_yet(
    records: list[RunRecord],
) -> None:
    first = records[0]
    assert (first.problem, first.solution, first.device) == ("multilabel_margin", "cpu_cpp", "cpu")
    assert first.ceiling is None and first.warnings == () and first.reason is None
    (bench,) = first.benchmarks
    assert bench.speedup is None and bench.mode is None and bench.stop is None
    assert bench.spot_checks is None and bench.compile is None and bench.state is None
    assert bench.solution.method == "wall_clock" and bench.solution.host_us is None
    assert bench.solution.median_us == pytest.approx(163.562, abs=1e-3)
    assert report.bench_speedup(bench).value == pytest.approx(10297.21 / 163.562, rel=1e-5)
    assert first.settings.checking.trials == 5 and first.settings.timing.graph is False


def test_the_committed_compile_baselines_match_the_rows_that_used_them(
    records: list[RunRecord],
) -> None:
    entries = baselines.read(H200)
    assert len(entries) == len(codec.read(H200, baselines.LOG_NAME))  # every line reads
    for run_id in (ISSUE_5_RUN, ISSUE_11_RUN):
        fast = of_run(records, run_id, "smooth_l1", "fast_cuda")
        known_then = [e for e in entries if e.by.time <= fast.time]  # later runs measured more
        for bench in fast.benchmarks:
            baseline, versus = baselines.versus(bench, known_then, run_id="another run")
            assert baseline == bench.compile and versus == bench.vs_compile


def test_the_committed_witness_saw_every_gpu_row_move_its_minimum_bytes(
    records: list[RunRecord],
) -> None:
    issue_12 = [r for r in records if r.run_id == ISSUE_12_RUN]
    assert len(issue_12) == 6 and all(r.settings.ncu for r in issue_12)
    gpu_rows = [b for r in issue_12 if r.device != "cpu" for b in r.benchmarks]
    assert len(gpu_rows) == 10
    for bench in gpu_rows:
        assert bench.witness is not None and bench.bytes is not None
        assert 1.0 <= bench.witness.moved / bench.bytes <= 1.6, (bench.name, bench.witness)
    table = report.table_rows([r for r in issue_12 if r.device != "cpu"])
    assert len(table) == 10 and not any("MOVED" in (row.flags or "") for row in table)
    cpu = of_run(records, ISSUE_12_RUN, "multilabel_margin", "cpu_cpp")
    assert "ncu witness skipped: the solution ran on the CPU" in cpu.warnings


def test_the_committed_runs_compare_by_time_and_by_speedup() -> None:
    """a000051 -> e617aef, both paired: the CPU row at 512x1024 was faster by time only (eager
    sped up as much on a quieter host); no load was recorded then, so none is shown."""
    text = comparison.render_comparison(f"{H200}@a000051", f"{H200}@e617aef")
    assert "Time old/new: 3 faster, 0 slower, 9 unchanged." in text
    assert "Speedup new/old: 2 faster, 0 slower, 10 unchanged." in text
    rows = {tuple(c.strip() for c in line.split("|")[1:4]): line for line in _shape_lines(text)}
    assert len(rows) == 12 and "*" not in "".join(rows.values())
    cpu = rows[("multilabel_margin", "cpu_cpp (CPU)", "512x1024")]
    assert "| 1.454 [1.344, 1.576] | faster" in cpu and "| 0.931 [0.860, 0.991]" in cpu
    assert "load old -> new" not in text and text.count("| not recorded ") == 2


def test_committed_runs_from_before_paired_speedups_still_compare() -> None:
    text = comparison.render_comparison(f"{H200}@81e52c2", f"{H200}@e617aef")
    lines = _shape_lines(text)
    assert len(lines) == 12 and all("]*" in line for line in lines)
    assert "Time old/new: 10 faster, 1 slower, 1 unchanged." in text


def test_committed_rows_carry_no_load_flag(records: list[RunRecord]) -> None:
    rows = report.table_rows(records)
    assert rows and not any("load" in (row.flags or "") for row in rows)
    # The machine's load is recorded since issue 15: every run from 2026-12-01 on has it
    measured = [row for row in rows if row.load_1m is not None]
    assert measured and all(row.when[:10] >= "2026-12-01" for row in measured)
    assert all(row.load_1m is not None for row in rows if row.when[:10] >= "2026-12-01")
    assert all(row.cpu_count == 16 and row.gpu_processes == 0 for row in measured)


def _shape_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(("| multilabel", "| smooth"))]


COMMITTED = sorted(  # results/cpu*, which runs without a GPU write, are local (.gitignore)
    p.name
    for p in (REPO / "results").iterdir()
    if (p / "runs.jsonl").exists() and not (p.name == "cpu" or p.name.startswith("cpu-"))
)


@pytest.mark.parametrize("profile", [HARNESS, KERNELBENCH])
def test_what_a_run_without_a_gpu_writes_is_left_out_of_git_in_every_profile(
    profile: str,
) -> None:
    settings = Settings(device="cpu", checking=Checking(profile=profile))
    folder = machine.results_folder(settings, Machine(gpu=None))
    written = folder / "runs.jsonl"
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", "-q", str(written.relative_to(REPO))], cwd=REPO
    )
    assert ignored.returncode == 0, f"{written.relative_to(REPO)} is not in .gitignore"


@pytest.mark.parametrize("machine", COMMITTED)
def test_each_committed_folders_tables_are_what_its_records_render(machine: str, tmp_path) -> None:
    committed = REPO / "results" / machine
    copy = tmp_path / machine
    shutil.copytree(committed, copy, ignore=shutil.ignore_patterns(".lock", "*.svg"))
    written, _ = rendering.render_folder(copy)
    tables = [path for path in written if path.suffix in (".md", ".csv", ".html")]
    assert tables, written
    for path in tables:
        assert path.read_text() == (committed / path.name).read_text(), path.name
