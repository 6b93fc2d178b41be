"""Comparing two recorded runs: spec selection, verdicts from intervals, one-sided rows."""

from pathlib import Path

import pytest

from harness import record as run_log
from harness.errors import UserError
from harness.record import BenchRow, RunRecord
from harness.results import comparison
from harness.stats import Interval
from tests.records_factory import bench, record

OLD_RUN, NEW_RUN = "20261128-090000-0ld0ld", "20261129-100000-4e54e5"
OLD_COMMIT, NEW_COMMIT = "1111111", "2222222"


def old(solution: str, *benchmarks: BenchRow, status: str = "ok") -> RunRecord:
    return record("p", solution, list(benchmarks), status, OLD_RUN, OLD_COMMIT, "2026-11-28T09:00Z")


def new(solution: str, *benchmarks: BenchRow, status: str = "ok") -> RunRecord:
    return record("p", solution, list(benchmarks), status, NEW_RUN, NEW_COMMIT, "2026-11-29T10:00Z")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """One folder, two runs: each solution's time moves by a known amount, 1% noise."""
    for each in (
        old("sped_up", bench(100.0, 200.0, seed=1)),
        old("slowed", bench(100.0, 200.0, seed=2)),
        old("steady", bench(100.0, 200.0, seed=3)),
        old("broke", bench(100.0, 200.0, seed=4)),
        old("dropped", bench(100.0, 200.0, seed=5)),
        new("sped_up", bench(80.0, 200.0, seed=11)),
        new("slowed", bench(125.0, 200.0, seed=12)),
        new("steady", bench(100.5, 200.0, seed=13)),
        new("broke", status="incorrect"),
        new("added", bench(50.0, 200.0, seed=15)),
    ):
        run_log.append(tmp_path, each)
    return tmp_path


def test_verdict_comes_from_the_whole_interval() -> None:
    assert comparison.verdict(Interval(1.05, 1.03, 1.07)) == "faster"
    assert (
        comparison.verdict(Interval(1.05, 1.01, 1.09)) == "unchanged"
    )  # point above, interval not
    assert comparison.verdict(Interval(0.95, 0.93, 0.97)) == "slower"
    assert comparison.verdict(Interval(0.95, 0.93, 0.99)) == "unchanged"
    assert comparison.verdict(Interval(1.05, 1.03, 1.07), threshold=0.05) == "unchanged"


def test_verdicts_on_crafted_samples(folder: Path) -> None:
    result = comparison.compare_runs(
        comparison.select(f"{folder}@{OLD_RUN}"), comparison.select(f"{folder}@{NEW_RUN}")
    )
    verdicts = {row["solution"]: row["verdict"] for row in result["shapes"]}
    assert verdicts == {"sped_up": "faster", "slowed": "slower", "steady": "unchanged"}
    sped_up = next(row for row in result["shapes"] if row["solution"] == "sped_up")
    assert sped_up["ratio"].low <= 100 / 80 <= sped_up["ratio"].high
    assert sped_up["old_speedup"] == pytest.approx(2.0) and sped_up["new_speedup"] == 2.5


def test_status_changes_and_one_sided_solutions_are_listed(folder: Path) -> None:
    result = comparison.compare_runs(
        comparison.select(f"{folder}@{OLD_COMMIT}"), comparison.select(f"{folder}@{NEW_RUN}")
    )
    assert [(r["solution"], r["old"], r["new"]) for r in result["status"]] == [
        ("broke", "ok", "incorrect")
    ]
    assert [r["solution"] for r in result["only_old"]] == ["broke", "dropped"]
    assert [r["solution"] for r in result["only_new"]] == ["added"]


def test_a_spec_selects_by_run_id_or_commit_prefix(folder: Path) -> None:
    by_run = comparison.select(f"{folder}@{OLD_RUN[:12]}")
    by_commit = comparison.select(f"{folder}@{OLD_COMMIT[:4]}")
    assert by_run.latest == by_commit.latest
    assert by_run.run_ids() == [OLD_RUN] and by_run.commits() == [OLD_COMMIT]
    assert len(by_run.latest) == 5
    latest = comparison.select(str(folder))
    assert {r.solution: r.run_id for r in latest.latest}["dropped"] == OLD_RUN
    assert latest.run_ids() == [OLD_RUN, NEW_RUN]


def test_unknown_specs_are_user_errors_that_say_what_exists(folder: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match=f"run ids {NEW_RUN}, {OLD_RUN}; commits {NEW_COMMIT}"):
        comparison.select(f"{folder}@deadbeef")
    with pytest.raises(UserError, match="no recorded runs"):
        comparison.select(str(tmp_path / "nowhere"))
    with pytest.raises(UserError, match="nothing after '@'"):
        comparison.select(f"{folder}@")


def test_rendered_comparison_names_both_sides(folder: Path) -> None:
    text = comparison.render_comparison(f"{folder}@{OLD_COMMIT}", f"{folder}@{NEW_COMMIT}")
    assert text.startswith(f"# Comparison: {folder}@{OLD_COMMIT} -> {folder}@{NEW_COMMIT}")
    assert f"| old    | {folder}@{OLD_COMMIT}" in text and "NVIDIA H200" in text
    assert "1 faster, 1 slower, 1 unchanged." in text
    assert "## Status changes" in text and "## Only in old" in text and "## Only in new" in text


def test_a_run_compared_with_itself_is_unchanged(folder: Path) -> None:
    result = comparison.compare_runs(comparison.select(str(folder)), comparison.select(str(folder)))
    assert {row["verdict"] for row in result["shapes"]} == {"unchanged"}
    assert all(row["ratio"].value == 1.0 for row in result["shapes"])
    assert not result["status"] and not result["only_old"] and not result["only_new"]
