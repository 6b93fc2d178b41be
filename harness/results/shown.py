"""Which records a table, chart or summary shows: the newest of each solution, except that a run
which passed without timing (--check-only, a replay) never hides the timed record of the same
code before it."""

from __future__ import annotations

from harness import status
from harness.record import RunRecord


def latest_per_solution(all_records: list[RunRecord], problem: str) -> list[RunRecord]:
    """The newest record of each solution (keyed by path) of `problem`, sorted by name. A run
    that passed without timing (--check-only, a replay) never hides the timed record of the
    same solution and reference before it: that record stays the solution's row."""
    latest: dict[str, RunRecord] = {}
    for record in all_records:
        if record.problem != problem:
            continue
        kept = latest.get(record.solution_path)
        if kept is not None and kept.benchmarks and _passed_untimed(record, kept):
            continue
        latest[record.solution_path] = record
    return sorted(latest.values(), key=lambda r: r.solution)


def _passed_untimed(record: RunRecord, timed: RunRecord) -> bool:
    """Whether `record` passed without timing the code `timed` timed (same sources)."""
    same = (record.solution_hash, record.reference_hash) == (
        timed.solution_hash,
        timed.reference_hash,
    )
    return record.status == status.OK and not record.benchmarks and same


def newest(records: list[RunRecord]) -> RunRecord | None:
    """The record made last, or None when there is none."""
    return max(records, key=lambda r: r.time, default=None)
