"""Sweeps: a folder of problems against a folder of solutions, matched by name in either
layout; and a sweep killed midway, then run again with --resume, ends as one that was not."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import run
from harness.run.discovery import sweep_sources
from harness.run.driving import sweep_summary
from harness.verdicts import UserError
from tests.conftest import FIXTURES, REPO, toy_solution
from tests.records_factory import bench, record

QUICK = ["--device", "cpu", "--max-samples", "5", "--trials", "2", "--timeout", "30"]
WAIT_S = 240.0


def test_solutions_match_problems_in_our_layout_and_in_kernelbenchs(tmp_path: Path) -> None:
    level = tmp_path / "KernelBench" / "level1"
    level.mkdir(parents=True)
    for name in ("19_ReLU.py", "3_Matmul.py", "_helper.py", "notes.txt"):
        (level / name).write_text("# a problem\n")
    runs = tmp_path / "runs"
    (runs / "19_ReLU").mkdir(parents=True)
    (runs / "19_ReLU" / "mine.py").write_text("class ModelNew: ...\n")
    for name in (
        "level_1_problem_19_sample_0_kernel.py",
        "level_1_problem_19_sample_1_kernel.py",
        "level_2_problem_19_sample_0_kernel.py",  # another level's problem 19
        "level_1_problem_3_sample_0_kernel.py",
    ):
        (runs / name).write_text("class ModelNew: ...\n")
    found = {s.name: [p.name for p in s.solutions] for s in sweep_sources(level, runs)}
    assert found == {
        "19_ReLU": [
            "mine.py",
            "level_1_problem_19_sample_0_kernel.py",
            "level_1_problem_19_sample_1_kernel.py",
        ],
        "3_Matmul": ["level_1_problem_3_sample_0_kernel.py"],
    }
    assert list(found) == ["3_Matmul", "19_ReLU"]  # by number, as KernelBench numbers them


def test_a_missing_sweep_folder_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"--problems .*no such folder"):
        sweep_sources(tmp_path / "nowhere", tmp_path)
    with pytest.raises(UserError, match="no problems in it"):
        sweep_sources(tmp_path, tmp_path)
    assert run.main(["--problems", str(tmp_path / "nowhere")]) == run.EXIT_INPUT


def test_a_sweep_that_finds_no_solution_fails_and_says_which_layouts_it_looked_for(
    tmp_path: Path, capsys
) -> None:
    problems, solutions = tmp_path / "problems", tmp_path / "solutions"
    shutil.copytree(FIXTURES / "toy", problems / "toy")
    (solutions / "elsewhere").mkdir(parents=True)
    (solutions / "elsewhere" / "good.py").write_text("class ModelNew: ...\n")
    argv = ["--problems", str(problems), "--solutions", str(solutions), "--no-audit"]
    assert run.main(argv) == run.EXIT_INPUT
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and "no solutions in" in said[0], said
    assert "<problem>/*.py" in said[0] and "level_<L>_problem_<N>_sample_<S>_kernel.py" in said[0]


SUITE = {"toy": ["good", "wrong_scale", "raises", "hard_exit"], "toy_mean": ["good", "raises"]}


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("suite")
    for problem, solutions in SUITE.items():
        shutil.copytree(FIXTURES / problem, root / "problems" / problem)
        (root / "solutions" / problem).mkdir(parents=True)
        for name in solutions:
            shutil.copy(toy_solution(name), root / "solutions" / problem / f"{name}.py")
    return root


def sweep(suite: Path, results: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "run.py",
        "--problems",
        str(suite / "problems"),
        "--solutions",
        str(suite / "solutions"),
        "--results-dir",
        str(suite / results),
        "--log-dir",
        str(suite / "logs"),
        "--build-dir",
        str(suite / "builds"),
        "--build-jobs",
        "1",
        *QUICK,
        *extra,
    ]


def verdicts(folder: Path) -> list[tuple[str, str, str]]:
    lines = (folder / "cpu" / "runs.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    return sorted((r["problem"], r["solution"], r["status"]) for r in records)


def test_a_killed_sweep_resumed_ends_as_one_that_was_not(suite: Path) -> None:
    whole = subprocess.run(sweep(suite, "whole"), cwd=REPO, capture_output=True, text=True)
    assert whole.returncode == run.EXIT_FAILED, whole.stderr[-2000:]
    expected = verdicts(suite / "whole")
    assert len(expected) == sum(map(len, SUITE.values()))
    log = suite / "cut" / "cpu" / "runs.jsonl"
    cut = subprocess.Popen(sweep(suite, "cut"), cwd=REPO, start_new_session=True)
    deadline = time.monotonic() + WAIT_S
    while not (log.exists() and log.read_text().count("\n") >= 2):
        assert time.monotonic() < deadline and cut.poll() is None, "no records came"
        time.sleep(0.05)
    os.killpg(cut.pid, signal.SIGKILL)  # the harness and its workers, at once
    cut.wait()
    before = log.read_text().count("\n")
    assert before < len(expected), "the sweep ended before it was killed"
    again = subprocess.run(
        sweep(suite, "cut", "--resume"), cwd=REPO, capture_output=True, text=True
    )
    assert again.returncode == run.EXIT_FAILED, again.stderr[-2000:]
    assert f"--resume: {before} solution(s) already recorded" in again.stderr
    assert verdicts(suite / "cut") == expected  # each once, as the whole sweep judged it
    for problem, solutions in SUITE.items():  # a sweep's tables are made at its end
        for folder in ("whole", "cut"):
            table = (suite / folder / "cpu" / f"{problem}.md").read_text()
            assert all(f"| {name} " in table for name in solutions), (folder, problem)
    assert "fast_0" in again.stdout and "problems/hour" in again.stdout


def test_the_sweep_summary_counts_earlier_records_but_rates_this_run_alone() -> None:
    now, before = "20261201-100000-bbbbbb", "20261130-100000-aaaaaa"
    records = [
        record("a", "fast", [bench(10.0, 30.0)], run_id=before),  # 3x
        record("b", "fast", [bench(10.0, 20.0)], run_id=now),  # 2x
        record("b", "slow", [bench(40.0, 20.0)], run_id=now),
        record("c", "wrong", status="incorrect", run_id=now),
    ]
    text = sweep_summary(records, now, seconds=360.0)
    assert "4 solution(s) of 3 problem(s): 3 ok, 1 incorrect" in text  # slow is ok
    assert "geomean 2.45x over 2 problem(s)" in text  # sqrt(3 * 2): c has no correct solution
    assert "1 solution(s) recorded earlier (--resume)" in text
    # 3 solutions of 2 problems in a tenth of an hour
    assert (
        "this run: 3 solution(s) judged in 360 s wall, 20 problems/hour, 30 solutions/hour" in text
    )


def test_the_sweep_summary_says_where_the_workers_time_went_by_phase_and_part() -> None:
    spent = {"phase_s": {"load": 1.0, "check": 6.0, "time": 4.0}}
    first = dataclasses.replace(
        record("a", "fast", [], run_id="r"), **spent, parts_s={"inputs": 2.0, "timing": 3.0}
    )
    second = dataclasses.replace(
        record("b", "fast", [], run_id="r"), **spent, parts_s={"inputs": 1.0, "compare": 4.0}
    )
    text = sweep_summary([first, second], "r", seconds=30.0)
    assert "workers' time: load 2.0 s, check 12.0 s, time 8.0 s; of check and time: " in text
    # 20 s of check and time, 13 s of them in parts, the largest first
    assert "compare 4.0 s, inputs 3.0 s, timing 3.0 s, elsewhere 10.0 s" in text
    third = dataclasses.replace(
        record("c", "wrong", status="incorrect", run_id="r"), phase_s={"load": 4.0, "check": 1.0}
    )
    text = sweep_summary([first, second, third], "r", seconds=30.0)
    # each phase's median over the solutions that reached it (the wrong one was never timed)
    assert "per solution, median: load 1.00 s (3), check 6.00 s (3), time 4.00 s (2)" in text


def test_a_sweep_run_with_check_only_says_none_timed_not_none_correct() -> None:
    text = sweep_summary([record("a", "fast", [], run_id="r")], "r", seconds=10.0)
    assert "best per problem: none timed (checked only)" in text
    assert "fast_" not in text and "geomean" not in text  # no 0% beside 'ok'
    text = sweep_summary([record("a", "w", status="incorrect", run_id="r")], "r", seconds=10.0)
    assert "best per problem: none correct" in text


def test_a_stopped_sweep_says_what_it_judged_and_how_soon(tmp_path: Path, capsys) -> None:
    from types import SimpleNamespace

    from harness import record as run_log
    from harness.run.driving import stopped_sweep

    mine, other = "20261206-010000-cccccc", "20261205-010000-aaaaaa"
    for each in (
        record("a", "fast", [bench(10.0, 30.0)], run_id=mine),
        record("b", "x", run_id=other),
    ):
        run_log.append(tmp_path, each)
    session = SimpleNamespace(recording=True, folder=tmp_path, run_id=mine)
    stopped_sweep(session, 36.0, "  first judgement at 3 s")  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert out.startswith("stopped: ") and "1 solution(s) of 1 problem(s): 1 ok" in out
    assert "this run: 1 solution(s) judged in 36 s wall" in out
    assert out.rstrip().endswith("first judgement at 3 s")
    stopped_sweep(SimpleNamespace(recording=False), 1.0, None)  # type: ignore[arg-type]
    assert capsys.readouterr().out == ""
