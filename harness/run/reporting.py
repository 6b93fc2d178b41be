"""What a run tells the user while the scheduler works (harness.run.scheduler), on stderr.

Two forms. `SerialReport`, for one slot: each solution's steps as harness.run.progress draws
them, as before the scheduler (a line for each build the pool finished). `SweepReport`, for a
sweep or several slots: one progress bar (tqdm) for the whole run, with how many solutions are
building, queued, being judged and failed, and the time left; a line per verdict above it.
Without a terminal, the bar becomes a status line every QUIET_S seconds.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TextIO, TypeVar

from tqdm import tqdm

from harness import verdicts
from harness.job import Ended, Judged, OnEvent
from harness.results import report
from harness.run.progress import QUIET_S, Progress, built_line
from harness.stats import geomean

if TYPE_CHECKING:
    from harness.record import RunRecord


class Unit(Protocol):
    """What a report reads of the scheduler's unit (harness.run.scheduler.Unit)."""

    index: int
    total: int
    built: Ended | None
    result: Ended | None

    @property
    def label(self) -> str: ...


T = TypeVar("T")
DETAIL_CHARS = 110  # of a failure's detail, in a verdict line of the sweep


@dataclass
class FirstWait:
    """How soon a run's first judgement began: seconds from the run's start to when its first
    solution was ready to judge (built, or needing no build) and to its first judgement, and
    the seconds its slots spent before that on the run's own jobs (the audits, the copy
    ceiling: `timed`). The rest of the wait, the slot had nothing to do: its idle time."""

    began: float = field(default_factory=time.monotonic)
    marks: dict[str, float] = field(default_factory=dict)  # "ready", "judging": the first time
    own_s: float = 0.0

    def mark(self, name: str) -> None:
        self.marks.setdefault(name, time.monotonic() - self.began)

    def timed(self, job: Callable[[], T]) -> T:
        """`job()`, a job of the run's own; its seconds count until the first judgement."""
        started = time.monotonic()
        try:
            return job()
        finally:
            if "judging" not in self.marks:
                self.own_s += time.monotonic() - started

    def line(self) -> str | None:
        """The sweep summary's line, once a judgement began."""
        judging, ready = self.marks.get("judging"), self.marks.get("ready")
        if judging is None:
            return None
        first = f"first solution ready at {ready:.0f} s, " if ready is not None else ""
        return (
            f"  first judgement at {judging:.0f} s ({first}the run's own jobs, audits and "
            f"copy ceiling, {self.own_s:.0f} s): the judging slot idle "
            f"{max(judging - self.own_s, 0):.0f} s before it"
        )


class Report:
    """The scheduler's events; this base class says nothing."""

    @staticmethod
    def serial(progress: Progress) -> Report:
        return SerialReport(progress)

    def begin(self, total: int, skipped: int) -> None:
        if skipped:
            self.note(
                f"--resume: {skipped} solution(s) already recorded with the same content, "
                "toolchain and settings are skipped"
            )

    def note(self, text: str) -> None:
        pass

    def building(self, unit: Unit) -> None:
        pass

    def built(self, unit: Unit, result: Judged) -> None:
        pass

    def judging(self, unit: Unit, slot: str) -> OnEvent:
        return lambda event: None

    def judged(self, unit: Unit, ran: RunRecord, again: str) -> None:
        pass

    def dropped(self, unit: Unit) -> None:
        pass

    def tick(self) -> None:
        pass

    def close(self) -> None:
        pass


class SerialReport(Report):
    """One solution at a time, step by step (harness.run.progress)."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress

    def note(self, text: str) -> None:
        self.progress.note(text)

    def built(self, unit: Unit, result: Judged) -> None:
        for build in result.builds or ():
            if not build.cached:
                self.note(f"{unit.label}: {built_line(build.name, build.seconds or 0, build.hint)}")

    def judging(self, unit: Unit, slot: str) -> OnEvent:
        self.progress.start(unit.index, unit.total, unit.label)
        built = (unit.built.judged.builds if unit.built else None) or ()
        self.progress.built_here = {b.name for b in built if not b.cached}
        return self.progress.event

    def judged(self, unit: Unit, ran: RunRecord, again: str) -> None:
        if unit.result is not None:  # no judge ran: the step line was never started
            self.progress.start(unit.index, unit.total, unit.label)
        from harness.run.session import summary

        self.progress.finish(summary(ran))
        if again:
            self.note(f"  replay: {again}")
        if log_line(ran):
            self.note(log_line(ran))


class SweepReport(Report):
    """The whole run as one bar: done, building, queued, judging, failed, and time left."""

    def __init__(self, slots: int, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()
        self.slots = slots
        self.lock = threading.Lock()
        self.total = self.done = self.failed = self.building_now = 0
        self.judging_now: set[int] = set()
        self.started = self.last_line = time.monotonic()
        self.bar: tqdm | None = None

    def begin(self, total: int, skipped: int) -> None:
        super().begin(total, skipped)
        self.total, self.started = total, time.monotonic()
        self.note(f"sweep: {total} solution(s) to judge on {self.slots} slot(s)")
        if self.live:
            self.bar = tqdm(total=total, desc="sweep", unit="solution", file=self.stream)

    def note(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def building(self, unit: Unit) -> None:
        with self.lock:
            self.building_now += 1

    def built(self, unit: Unit, result: Judged) -> None:
        with self.lock:
            self.building_now -= 1
        self._refresh()

    def judging(self, unit: Unit, slot: str) -> OnEvent:
        with self.lock:
            self.judging_now.add(id(unit))
        self._refresh()
        return lambda event: None

    def judged(self, unit: Unit, ran: RunRecord, again: str) -> None:
        with self.lock:
            self.judging_now.discard(id(unit))
            self.done += 1
            self.failed += ran.status not in verdicts.PASSING
        self.note(f"{unit.label}: {verdict_line(ran)}")
        if log_line(ran):
            self.note(log_line(ran))
        if self.bar is not None:
            self.bar.update(1)
        self._refresh()

    def dropped(self, unit: Unit) -> None:
        with self.lock:
            self.total -= 1
        if self.bar is not None:
            self.bar.total = self.total
        self._refresh()

    def counts(self) -> str:
        """'building 3, queued 40, judging 2, failed 1' as the run stands."""
        judging = len(self.judging_now)
        queued = self.total - self.done - judging - self.building_now
        return (
            f"building {self.building_now}, queued {max(queued, 0)}, judging {judging}, "
            f"failed {self.failed}"
        )

    def tick(self) -> None:
        if self.live or time.monotonic() - self.last_line < QUIET_S:
            return
        self.last_line = time.monotonic()
        elapsed = time.monotonic() - self.started
        left = ""
        if self.done:
            remaining = elapsed / self.done * (self.total - self.done)
            left = f", about {tqdm.format_interval(remaining)} left"
        self.note(f"sweep: {self.done}/{self.total} done, {self.counts()}{left}")

    def _refresh(self) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(self.counts(), refresh=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        elapsed = time.monotonic() - self.started
        self.note(
            f"sweep: {self.done}/{self.total} judged in {tqdm.format_interval(elapsed)}, "
            f"{self.failed} failed"
        )


def log_line(ran: RunRecord) -> str:
    """'  log: <path>' under a failed solution's line (the whole of its worker's output), or ''
    where it passed or has no log."""
    if ran.status in verdicts.PASSING or not ran.log:
        return ""
    return f"  log: {ran.log}"


def verdict_line(ran: RunRecord) -> str:
    """The verdict, the geometric mean speedup over eager where timed, or the failure's detail."""
    line = ran.status
    speedups = [report.bench_speedup(bench).value for bench in ran.benchmarks]
    if speedups:
        line += f" {geomean(speedups):.2f}x over eager ({len(speedups)} shape(s))"
    if ran.status not in verdicts.PASSING and ran.detail:
        line += f": {ran.detail[:DETAIL_CHARS]}"
    return line
