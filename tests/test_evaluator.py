"""The harness from Python (harness.run.evaluator): typed verdicts, batches judged as one run,
futures, source text staged, bad input refused in one line, and every result recorded."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from harness import record, verdicts
from harness.run.evaluator import Evaluation, Evaluator, Source
from harness.stats import Interval
from harness.verdicts import UserError
from tests.conftest import REPO, TOY, toy_solution

QUICK = {"device": "cpu", "max_samples": 5, "trials": 2}


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory: pytest.TempPathFactory) -> Evaluator:
    root = tmp_path_factory.mktemp("evaluator")
    places = {"results_dir": root / "results", "log_dir": root / "logs"}
    return Evaluator(staging=root / "staged", **QUICK, **places)


def recorded(evaluator: Evaluator) -> list[record.RunRecord]:
    (log,) = Path(evaluator.args.results_dir).glob(f"*/{record.LOG_NAME}")
    return record.read(log.parent)


def test_a_solution_file_gets_its_verdict_speedups_and_record(evaluator: Evaluator) -> None:
    result = evaluator.evaluate(str(TOY), toy_solution("good"))
    assert isinstance(result, Evaluation) and result.ok, result.detail
    assert result.record is not None and result.record.checks == 3 * 2
    assert len(result.speedups) == len(result.rows) == len(result.record.benchmarks) > 0
    low, high = result.speedups[0].low, result.speedups[0].high
    assert low <= result.speedups[0].value <= high and result.speedup is not None
    assert result.record in recorded(evaluator)  # recorded as run.py records it
    assert result.sol_score is None  # no speed-of-light bound on a CPU


def test_a_batch_is_one_run_and_keeps_its_order(evaluator: Evaluator) -> None:
    wrong = Path(toy_solution("good")).read_text().replace("+ 1", "- 1")
    results = evaluator.evaluate_many(
        [
            (str(TOY), Source(wrong, name="minus_one")),
            (str(TOY), toy_solution("good")),
            ("no_such_problem", toy_solution("good")),
            (str(TOY), toy_solution("no_model_new")),
            (str(TOY), toy_solution("raises")),
        ]
    )
    statuses = [r.status for r in results]
    assert statuses == [
        verdicts.INCORRECT,
        verdicts.OK,
        verdicts.PROBLEM_ERROR,
        verdicts.LOAD_ERROR,
        verdicts.RUNTIME_ERROR,
    ], [(r.status, r.detail) for r in results]
    assert results[0].solution == "minus_one" and "elements differ" in results[0].detail
    assert "no_such_problem" in results[2].detail and results[2].record is None
    assert "defines no ModelNew" in results[3].detail and results[3].record is None
    runs = {r.record.run_id for r in results if r.record is not None}
    assert len(runs) == 1  # one sweep for the batch


def test_source_text_is_kept_where_its_record_points(evaluator: Evaluator) -> None:
    text = Path(toy_solution("good")).read_text()
    result = evaluator.evaluate(str(TOY), Source(text))
    assert result.ok and result.record is not None
    kept = Path(result.record.solution_path)
    assert kept.is_file() and kept.read_text() == text
    assert kept.is_relative_to(Path(evaluator.staging))


def test_submitted_futures_are_judged_together(evaluator: Evaluator) -> None:
    futures = [evaluator.submit(str(TOY), toy_solution(name)) for name in ("good", "returns_list")]
    results = [future.result(timeout=300) for future in futures]
    assert [r.status for r in results] == [verdicts.OK, verdicts.INCORRECT]


@pytest.mark.parametrize(
    ("flags", "words"),
    [({"trials": 0}, "--trials must be at least 1"), ({"no_such_flag": 1}, "unrecognized")],
)
def test_bad_settings_are_one_clear_error(flags: dict, words: str) -> None:
    with pytest.raises(UserError, match=words):
        Evaluator(**flags)


def test_a_missing_file_or_problem_is_refused_before_anything_runs(evaluator: Evaluator) -> None:
    with pytest.raises(UserError, match="no such file"):
        evaluator.evaluate(str(TOY), "/nonexistent/solution.py")
    with pytest.raises(UserError, match="no_such_problem"):
        evaluator.evaluate("no_such_problem", toy_solution("good"))
    with pytest.raises(UserError, match="Python identifier"):
        evaluator.evaluate(str(TOY), Source("x = 1", name="not a name"))


def test_a_script_without_a_main_guard_works_even_from_stdin(tmp_path: Path) -> None:
    script = (
        "from harness.run.evaluator import Evaluator\n"
        f"result = Evaluator(device='cpu', max_samples=5, trials=2, results_dir={str(tmp_path)!r},"
        f" log_dir={str(tmp_path)!r}).evaluate({str(TOY)!r}, {toy_solution('good')!r})\n"
        "print('verdict:', result.status)\n"
    )
    ended = subprocess.run(
        [sys.executable, "-"], input=script, cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert "verdict: ok" in ended.stdout, ended.stderr[-3000:]


def rl_reward() -> ModuleType:
    spec = importlib.util.spec_from_file_location("rl_reward", REPO / "examples" / "rl_reward.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def verdict(status: str, *lows: float) -> Evaluation:
    speedups = tuple(Interval(low * 1.2, low, low * 1.5) for low in lows)
    return Evaluation("p", "s", status, "", None, speedups, None, (), None)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (verdict(verdicts.REJECTED), -1.0),
        (verdict(verdicts.INCORRECT), 0.0),
        (verdict(verdicts.COMPILE_ERROR), 0.0),
        (verdict(verdicts.TIMEOUT), 0.0),
        (verdict(verdicts.PROBLEM_ERROR), None),
        (verdict(verdicts.NO_GPU), None),
        (verdict(verdicts.OK), 0.3),  # checked only
        (verdict(verdicts.OK, 0.5, 0.8), 0.3),  # correct, slower than eager
        (verdict(verdicts.OK, 4.0), 0.8),  # sure of 4x: two of the four log2 steps
        (verdict(verdicts.OK, 2.0, 8.0), 0.8),  # their geometric mean is 4x
        (verdict(verdicts.OK, 1000.0), 1.3),  # capped at 16x
    ],
)
def test_the_example_reward_scores_each_verdict_as_its_doc_says(
    given: Evaluation, expected: float | None
) -> None:
    got = rl_reward().reward(given)
    assert got == expected if expected is None else got == pytest.approx(expected)
