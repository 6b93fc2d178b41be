"""Comparing two recorded runs: spec selection, verdicts from intervals, one-sided rows."""

from pathlib import Path

import pytest

from harness import record as run_log
from harness.record import BenchRow, RunRecord
from harness.results import comparison
from harness.stats import Interval
from harness.verdicts import UserError
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


def cells(line: str) -> list[str]:
    """The cells of a markdown table's line, stripped."""
    return [cell.strip() for cell in line.strip("|").split("|")]


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
    verdicts = {row.solution: row.verdict for row in result.shapes}
    assert verdicts == {"sped_up": "faster", "slowed": "slower", "steady": "unchanged"}
    sped_up = next(row for row in result.shapes if row.solution == "sped_up")
    assert sped_up.ratio.low <= 100 / 80 <= sped_up.ratio.high
    assert sped_up.old_speedup == pytest.approx(2.0) and sped_up.new_speedup == 2.5


def test_status_changes_and_one_sided_solutions_are_listed(folder: Path) -> None:
    result = comparison.compare_runs(
        comparison.select(f"{folder}@{OLD_COMMIT}"), comparison.select(f"{folder}@{NEW_RUN}")
    )
    assert [(r.solution, r.old, r.new) for r in result.status] == [("broke", "ok", "incorrect")]
    assert [r.solution for r in result.only_old] == ["broke", "dropped"]
    assert [r.solution for r in result.only_new] == ["added"]


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
    assert {row.verdict for row in result.shapes} == {"unchanged"}
    assert all(row.ratio.value == 1.0 for row in result.shapes)
    assert not result.status and not result.only_old and not result.only_new


def test_time_and_speedup_ratios_disagree_when_eager_slowed_too(tmp_path: Path) -> None:
    """The issue's case: a C++ solution's time rose 20.0 -> 21.9 ms while eager's rose
    24.6 -> 31.5 ms on a busier host; its speedup rose 1.23x -> 1.44x."""
    cpu = {"device": "cpu"}
    older = record("p", "cpp", [bench(20_000.0, 24_600.0, seed=1)], run_id=OLD_RUN, **cpu)
    run_log.append(tmp_path, older)
    newer = record("p", "cpp", [bench(21_875.0, 31_500.0, seed=2)], run_id=NEW_RUN, **cpu)
    run_log.append(tmp_path, newer)
    old_side = comparison.select(f"{tmp_path}@{OLD_RUN}")
    result = comparison.compare_runs(old_side, comparison.select(f"{tmp_path}@{NEW_RUN}"))
    (row,) = result.shapes
    assert row.verdict == "slower" and row.ratio.high < 0.93
    assert row.speedup_verdict == "faster" and row.paired
    ratio = row.speedup_ratio
    assert ratio.value == pytest.approx(1.44 / 1.23)
    # the two speedup intervals (each 2% either side) divided crosswise
    assert (ratio.low, ratio.high) == pytest.approx(
        (1.44 * 0.98 / 1.23 / 1.02, 1.44 * 1.02 / 1.23 / 0.98)
    )
    text = comparison.render_comparison(f"{tmp_path}@{OLD_RUN}", f"{tmp_path}@{NEW_RUN}")
    assert "Time old/new: 0 faster, 1 slower, 0 unchanged." in text
    assert "Speedup new/old: 1 faster, 0 slower, 0 unchanged." in text
    assert "The two verdicts disagree on 1 shape(s)" in text
    line = next(li for li in text.splitlines() if li.startswith("| p "))
    assert cells(line)[6] == "slower"  # by time
    assert cells(line)[-2:] == ["1.171 [1.125, 1.219]", "faster"]  # by speedup, paired


def test_old_records_without_speedup_intervals_compare_unpaired(folder: Path) -> None:
    """A side recorded before the paired sampler takes the unpaired interval of its medians:
    wider than the recorded point, marked, and still judged."""
    run_log.append(folder, old("unpaired", bench(100.0, 200.0, seed=6, new_format=False)))
    run_log.append(folder, new("unpaired", bench(80.0, 200.0, seed=16)))
    result = comparison.compare_runs(
        comparison.select(f"{folder}@{OLD_RUN}"), comparison.select(f"{folder}@{NEW_RUN}")
    )
    rows = {row.solution: row for row in result.shapes}
    unpaired, paired = rows["unpaired"], rows["sped_up"]
    assert not unpaired.paired and paired.paired
    ratio = unpaired.speedup_ratio
    assert ratio.low < 2.5 / 2.0 / 1.02 and ratio.high > 2.5 / 2.0 / 0.98  # wider than paired
    assert ratio.low > 1.02 and unpaired.speedup_verdict == "faster"
    text = comparison.render_comparison(f"{folder}@{OLD_RUN}", f"{folder}@{NEW_RUN}")
    line = next(li for li in text.splitlines() if li.startswith("| p ") and "unpaired" in li)
    assert cells(line)[-2:] == ["1.254 [1.221, 1.284]*", "faster"]
    assert "* marks a speedup ratio with a side recorded" in text


def test_a_side_without_any_speedup_intervals_still_compares() -> None:
    old_bench = bench(100.0, 200.0, seed=1, new_format=False)
    new_bench = bench(100.0, 200.0, seed=2, new_format=False)
    ratio, paired = comparison.speedup_ratio(old_bench, new_bench)
    assert not paired and ratio.low < 1 < ratio.high
    assert comparison.verdict(ratio) == "unchanged"


def test_each_sides_load_is_shown_where_recorded(tmp_path: Path) -> None:
    cpu = {"device": "cpu"}
    quiet, busy = {"load_1m": 2.0, "cpu_count": 16}, {"load_1m": 24.3, "cpu_count": 16}
    older = record("p", "cpp", [bench(100.0, 200.0)], run_id=OLD_RUN, busy=quiet, **cpu)
    run_log.append(tmp_path, older)
    newer = record("p", "cpp", [bench(100.0, 200.0)], run_id=NEW_RUN, busy=busy, **cpu)
    run_log.append(tmp_path, newer)
    text = comparison.render_comparison(f"{tmp_path}@{OLD_RUN}", f"{tmp_path}@{NEW_RUN}")
    assert "| load (1 min/CPUs)" in text and "| 2.0/16 " in text and "| 24.3/16 " in text
    line = next(li for li in text.splitlines() if li.startswith("| p "))
    assert cells(line)[-1] == "2.0/16 -> 24.3/16 loaded"


def test_no_load_column_where_no_side_recorded_one(folder: Path) -> None:
    text = comparison.render_comparison(f"{folder}@{OLD_COMMIT}", f"{folder}@{NEW_COMMIT}")
    assert "load old -> new" not in text and "| not recorded " in text
