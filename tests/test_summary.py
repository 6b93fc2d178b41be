"""The summary across problems: scores, best per problem, fast_p, rendered from the log alone."""

import dataclasses
import math
from pathlib import Path

import pytest

from harness import record as run_log
from harness.record import RunRecord
from harness.results import rendering, summary
from tests.records_factory import bench, record


def rows_by_name(all_records: list[RunRecord]) -> dict[tuple[str, str], dict]:
    return {(r.problem, r.solution): r for r in summary.summary_rows(all_records)}


def test_score_is_the_geomean_of_the_shapes_speedups() -> None:
    two_shapes = record("p", "a", [bench(10.0, 20.0), bench(10.0, 80.0, name="big")])
    assert summary.score(two_shapes) == pytest.approx(4.0)  # sqrt(2 * 8)


def test_old_records_without_speedup_score_from_their_medians() -> None:
    old = record("p", "a", [bench(10.0, 30.0, new_format=False)])
    assert old.benchmarks[0].speedup is None
    expected = old.benchmarks[0].reference.median_us / 10.0
    assert summary.score(old) == pytest.approx(expected, rel=0.02)
    assert summary.compile_score(old) is None


def test_no_score_unless_ok_with_timed_shapes() -> None:
    assert summary.score(record("p", "a", [bench(10.0, 20.0)], status="incorrect")) is None
    assert summary.score(record("p", "a", [])) is None


def test_compile_score_needs_every_shape_to_have_one() -> None:
    both = record("p", "a", [bench(10, 20, vs_compile=2.0), bench(10, 20, "b", vs_compile=0.5)])
    one = record("p", "a", [bench(10, 20, vs_compile=2.0), bench(10, 20, "b")])
    assert summary.compile_score(both) == pytest.approx(1.0)
    assert summary.compile_score(one) is None


def test_sol_means_are_geomeans_over_shapes_and_shown_beside_fast_p() -> None:
    ceiling = run_log.Ceiling(copy_gbps=1000.0)  # 1 GB/s per us: T_SOL = bytes / 1e6 us

    def shape(solution_us: float, sol_us: float, name: str) -> run_log.BenchRow:
        bound = run_log.Bound("fp32", 67.0, None)
        timed = bench(solution_us, 4 * sol_us, name=name)
        return dataclasses.replace(timed, bytes=int(sol_us * 1e6), flops=1, bound=bound)

    run = record("p", "a", [shape(20.0, 10.0, "x"), shape(80.0, 10.0, "y")])
    share, score = summary.sol_means(dataclasses.replace(run, ceiling=ceiling))
    assert share == pytest.approx(math.sqrt(0.5 * 0.125), rel=0.02)  # shares 50% and 12.5%
    assert score == pytest.approx(math.sqrt((1 / (1 + 10 / 30)) * (1 / (1 + 70 / 30))), rel=0.02)
    assert summary.sol_means(run) == (None, None)  # no ceiling recorded: no bound
    on_cpu = dataclasses.replace(run, ceiling=ceiling, device="cpu")
    assert summary.sol_means(on_cpu) == (None, None)  # a C++ solution timed on the CPU
    text = summary.summary_markdown([dataclasses.replace(run, ceiling=ceiling)])
    assert ["p", "a", "ok", "2", "1.00x", "", "25%", "0.47", "yes"] in cells(text)
    assert "shares of the speed of light: 25%, and of their SOL scores: 0.47" in text


def test_the_latest_record_of_each_solution_decides() -> None:
    old = record("p", "a", [bench(10.0, 20.0)], when="2026-11-28T10:00:00+00:00")
    new = record("p", "a", status="incorrect", when="2026-11-29T10:00:00+00:00")
    row = rows_by_name([old, new])[("p", "a")]
    assert row.status == "incorrect" and row.score is None and row.shapes == 0


def test_a_check_only_run_or_replay_that_passed_never_hides_the_timed_row() -> None:
    timed = record("p", "a", [bench(10.0, 20.0)], when="2026-11-28T10:00:00+00:00")
    checked = record("p", "a", when="2026-11-29T10:00:00+00:00")  # ok, nothing timed
    row = rows_by_name([timed, checked])[("p", "a")]
    assert row.status == "ok" and row.score == pytest.approx(2.0) and row.shapes == 1
    # changed sources: the check-only record is the solution's row, untimed as it is
    changed = dataclasses.replace(checked, solution_hash="1" * 64)
    assert rows_by_name([timed, changed])[("p", "a")].score is None
    # a replay that failed is the newest verdict on the same code, and shows
    failed = dataclasses.replace(checked, status="incorrect")
    assert rows_by_name([timed, failed])[("p", "a")].status == "incorrect"


def crafted() -> list[RunRecord]:
    """Four problems: best 3x, best 1.2x, nothing ok, and only a CPU-run solution ok."""
    return [
        record("alpha", "fast", [bench(10.0, 30.0)]),
        record("alpha", "slow", [bench(10.0, 12.0)]),
        record("beta", "only", [bench(10.0, 12.0)]),
        record("gamma", "broken", status="compile_error"),
        record("delta", "cpp", [bench(1.0, 10.0)], device="cpu"),
    ]


def test_best_per_problem_skips_failures_and_cpu_runs() -> None:
    best = summary.best_per_problem(summary.summary_rows(crafted()))
    assert best["alpha"] is not None and best["alpha"].solution == "fast"
    assert best["beta"] is not None and best["beta"].solution == "only"
    assert best["gamma"] is None
    assert best["delta"] is None  # 10x on the CPU is not a GPU result


def test_fast_p_counts_every_problem_in_the_denominator() -> None:
    best = summary.best_per_problem(summary.summary_rows(crafted()))
    assert summary.fast_p(best, 1.0) == pytest.approx(2 / 4)
    assert summary.fast_p(best, 1.5) == pytest.approx(1 / 4)
    assert summary.fast_p(best, 2.0) == pytest.approx(1 / 4)
    assert summary.fast_p(best, 3.5) == 0.0
    assert math.isnan(summary.fast_p({}, 1.0))


def cells(markdown: str) -> list[list[str]]:
    """The stripped cells of every table line of `markdown`."""
    lines = [line for line in markdown.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


def test_summary_renders_and_writes_from_the_log(tmp_path: Path) -> None:
    for each in crafted():
        run_log.append(tmp_path, each)
    path, _ = rendering.render_summary(tmp_path)
    assert path == tmp_path / summary.SUMMARY_NAME
    text = path.read_text()
    assert text.startswith("# Summary on NVIDIA H200")
    table = cells(text)
    assert ["alpha", "fast", "ok", "1", "3.00x", "", "", "", "yes"] in table
    assert ["gamma", "broken", "compile_error", "0", "", "", "", "", ""] in table
    assert ["delta", "(only CPU runs ok)", "", "", "", ""] in table
    assert ["gamma", "(none ok)", "", "", "", ""] in table
    assert f"best scores: {math.sqrt(3.0 * 1.2):.2f}x (over 2 of 4 problem(s)" in text
    assert ["fast_1", "0.50 (2 of 4)"] in table and ["fast_2", "0.25 (1 of 4)"] in table
    assert ["delta", "cpp (CPU)", "ok", "1", "10.00x", "", "", "", ""] in table
    assert "never chosen as a problem's best" in text
