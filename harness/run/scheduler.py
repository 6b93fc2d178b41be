"""Run many solutions of many problems at once: builds in a pool, judging on every slot.

Every solution's build job is queued as the run starts, as many running at once as the pool
allows (harness.run.pool). Each solution is judged as soon as its build is done, on the first
free slot (one per device, one job at a time each). A verdict the build reaches alone (a
compile error, a CUDA solution on a CPU run) is recorded without a judge. Each record is
appended the moment it is made, so an interrupted run keeps everything it finished, and
`--resume` skips what is already recorded for the same solution content, toolchain and
settings (`Earlier`, `comparable`).

Builds must not share the host's cores with timed calls: on a CPU those are the whole call; on
a GPU it is the host time that the per-call figures and the KernelBench profile's timer include
(docs/scale.md). So this host's pool stops every build's processes while a slot times
(harness.run.isolate) and judges as each is built; a pool that cannot (Ray's, or without
/proc) judges a run that times once every build is done.

run.py --resume: what is already recorded for the same solution, toolchain and settings.

A record stands for a solution when all of these are the same: the problem and its reference's
sources, the solution's sources (toolchain.source_hash), the toolchain (torch, CUDA, the GPU's
model, the build target) and every setting but those that differ from run to run by design: the
secret (fresh each run, unless given), the folders, and which GPU of the host it ran on.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from harness import codec, record, toolchain, verdicts
from harness.job import Ended, Event, Job, Judged, OnEvent, failure
from harness.loading import Problem
from harness.record import RunRecord
from harness.results.baselines import Baseline
from harness.run.auditing import Preparing
from harness.run.discovery import ProblemSource, builds_at_import
from harness.run.reporting import FirstWait, Report
from harness.run.session import Session, harness_checked
from harness.settings import Settings
from harness.verdicts import ProblemRefused, UserError

JOIN_S = 0.5  # how often the waiting main thread wakes (for Ctrl-C)
Work = list[tuple[ProblemSource, list[Path]]]
Outcome = list["Judging"]


class Slot(Protocol):
    name: str

    def run(
        self,
        job: Job,
        folders: list[Path],
        on_event: OnEvent,
        more: int = 1,
    ) -> Ended: ...


class Pool(Protocol):
    slots: list[Any]
    holds_builds: bool  # builds are stopped while a slot times (harness.run.isolate)

    def build(self, job: Job, folders: list[Path], on_event: OnEvent) -> Future[Ended]: ...

    def built(self, job: Job) -> bool: ...


class Stopped(Exception):
    """Raised inside a worker's watch when the run stops (Ctrl-C, a harness failure)."""


@dataclass(eq=False)
class Unit:
    """One solution of one problem, on its way through the run."""

    source: ProblemSource
    solution: Path
    index: int  # within its problem, from 1
    total: int  # its problem's solutions
    job: Job
    result: Ended | None = None  # reached without a judge: a shortcut or the build's
    built: Ended | None = None  # how the build job ended
    ran: RunRecord | None = None
    ready: threading.Event = field(default_factory=threading.Event)

    @property
    def label(self) -> str:
        return f"{self.source.name}/{self.solution.stem}"

    @property
    def folders(self) -> list[Path]:
        return [self.solution.parent, self.source.reference.parent]


class Scheduler:
    def __init__(
        self,
        session: Session,
        pool: Pool,
        report: Report | None = None,
        again: bool = False,
        in_order: bool = True,
        count_refused: bool = False,
    ) -> None:
        """`again` (--resume): skip what is recorded for the same content and settings.
        `in_order`: judge the solutions in their order (each slot takes the next one and waits
        for its build), else each as soon as it is built (a sweep). `count_refused` (a sweep):
        record the solutions of a problem refused for its own fault (ProblemRefused) as
        `problem_error`, not judged, so that its summaries count them."""
        self.session, self.pool, self.again = session, pool, again
        self.in_order, self.count_refused = in_order, count_refused
        self.cursor = self.handed = 0  # in order: the next unit to judge; units handed out
        self.wait = FirstWait()  # how soon the first judgement began
        self.report = report or Report.serial(session.progress)
        self.ready: queue.Queue[Unit | None] = queue.Queue()
        self.stop = threading.Event()
        self.lock = threading.Lock()  # the run log, the tables and the counts
        self.failure: BaseException | None = None
        self.preparing = Preparing(session.auditing, session.prepare)
        self.compiled: dict[str, list[Baseline]] = {}
        self.left: dict[str, int] = {}  # each problem's units not yet recorded
        self.units: list[Unit] = []
        self.baseline_locks: dict[str, threading.Lock] = {}
        self.rendered: set[str] = set()  # problems whose tables this run has made
        self.resumed: set[str] = set()  # problems with records skipped under --resume
        self.building_only = False  # --build-only; else a build whole in the cache is not run

    def run(self, work: Work) -> Outcome:
        """Judge every solution of `work`; how each problem ended (`Judging`)."""
        earlier = Earlier(self.session) if self.again else None
        skipped: dict[tuple[str, Path], RunRecord] = {}
        builds: list[Future[Ended]] = []
        for source, solutions in work:
            for index, solution in enumerate(solutions, start=1):
                content = toolchain.source_hash(solution)
                found = earlier.find(source, solution, content) if earlier else None
                if found is not None:
                    skipped[(source.name, solution)] = found
                    continue
                builds += self._queue(source, solution, (index, len(solutions)), content)
        self.report.begin(len(self.units), len(skipped))
        self.resumed = {name for name, _ in skipped}  # their tables are made again at the end
        try:
            self._judge_all(work, builds)
        finally:
            self._close()
        return self._outcome(work, skipped)

    def build(self, work: Work) -> list[tuple[Unit, Ended]]:
        """--build-only: every solution's build job, as many at once as the pool allows, and
        nothing else (no judge, no record); each unit with its build's result."""
        self.building_only = True  # a cached build is loaded, to say it is there
        builds: list[Future[Ended]] = []
        for source, solutions in work:
            for index, solution in enumerate(solutions, start=1):
                content = toolchain.source_hash(solution)
                builds += self._queue(source, solution, (index, len(solutions)), content)
        self.report.begin(len(self.units), 0)
        try:
            self._wait(lambda: all(f.done() for f in builds))
        finally:
            self._close()
        nothing = Ended(Judged(verdicts.OK, "nothing to build"))
        return [(u, u.built or u.result or nothing) for u in self.units]

    def _queue(
        self, source: ProblemSource, solution: Path, place: tuple[int, int], content: str
    ) -> list[Future[Ended]]:
        """Make `solution`'s unit (`place`: its index among the problem's solutions, and their
        number) and start its build (`_start`)."""
        index, total = place
        job = self.session.unit_job(source, solution, index, content)
        unit = Unit(source, solution, index, total, job)
        self.units.append(unit)
        return self._start(unit)

    def _start(self, unit: Unit) -> list[Future[Ended]]:
        """Queue `unit`'s build, or the unit itself where it needs no worker."""
        self.left[unit.source.name] = self.left.get(unit.source.name, 0) + 1
        shortcut = self.session.shortcut(unit.solution, unit.job.content_hash)
        unit.result = Ended(shortcut) if shortcut is not None else None
        cached = not self.building_only and self.pool.built(unit.job)
        refused = self.preparing.refuse_early(unit.source)  # its problem first: no build wasted
        if unit.result is not None or cached or refused or not builds_at_import(unit.solution):
            self._ready(unit)  # judged without a build job, or not at all
            return []
        job = replace(unit.job, task="build")  # its log is the judge's, which appends to it
        self.report.building(unit)
        future = self.pool.build(job, unit.folders, self._watching(lambda event: None))
        future.add_done_callback(lambda done: self._built(unit, done))
        return [future]

    def _built(self, unit: Unit, future: Future[Ended]) -> None:
        error = None if future.cancelled() else future.exception()
        if future.cancelled() or error is not None:
            if error is not None and not isinstance(error, Stopped):
                self._fail(error)
            return
        try:  # a failure here would die in the future's callback, and the run would wait on
            unit.built = future.result()
            if self._final(unit.built.judged):
                unit.result = unit.built
            self.report.built(unit, unit.built.judged)
        except BaseException as err:  # handed to the run, which stops
            self._fail(err)
            return
        self._ready(unit)

    def _ready(self, unit: Unit) -> None:
        self.wait.mark("ready")
        unit.ready.set()
        self.ready.put(unit)

    def _next(self) -> Unit | None:
        """The next unit to judge, once it is ready; None when there is none left."""
        if not self.in_order:
            unit = self.ready.get()
            with self.lock:
                self.handed += unit is not None
            return unit
        with self.lock:
            if self.cursor >= len(self.units):
                return None
            unit = self.units[self.cursor]
            self.cursor += 1
            self.handed += 1
        while not unit.ready.wait(JOIN_S):
            if self.stop.is_set():
                raise Stopped
        return unit

    def _final(self, built: Judged) -> bool:
        """Whether the build job's verdict stands without a judge (worker.build_only)."""
        if built.harness_error or built.ok:
            return False
        if built.status in (verdicts.COMPILE_ERROR, verdicts.NO_GPU, verdicts.REJECTED):
            return True
        if built.status == verdicts.TIMEOUT and built.detail.startswith("build step"):
            return True
        return self.session.device.type == "cpu"

    def _judge_all(self, work: Work, builds: list[Future[Ended]]) -> None:
        self.preparing.order = [source for source, _ in work]  # each prepared when judged
        if work:
            self.session.ceiling(work[0][0], self._first_slot(work[0][0]))
        if not (self.session.settings.checking.check_only or self.pool.holds_builds):
            self._wait(lambda: all(f.done() for f in builds))
        threads = [
            threading.Thread(target=self._serve, args=(slot,), daemon=True, name=slot.name)
            for slot in self.pool.slots
        ]
        for thread in threads:
            thread.start()
        self._wait(lambda: not any(self.left.values()))
        for _ in threads:
            self.ready.put(None)
        self._wait(lambda: not any(t.is_alive() for t in threads))

    def _wait(self, done: Callable[[], bool]) -> None:
        """Wait until `done()`, waking often (Ctrl-C is raised here); a failure in a thread
        stops the run and is raised here."""
        try:
            while not done():
                if self.failure is not None:
                    raise self.failure
                self.stop.wait(JOIN_S)
                self.report.tick()
            if self.failure is not None:
                raise self.failure
        except BaseException:
            self.stop.set()
            raise

    def _serve(self, slot: Slot) -> None:
        """A slot's thread: judge ready units one at a time until the run ends."""
        while not self.stop.is_set():
            try:
                unit = self._next()
                if unit is None:
                    return
                self._judge(unit, slot)
            except Stopped:
                return
            except BaseException as err:
                self._fail(err)
                return

    def _judge(self, unit: Unit, slot: Slot) -> None:
        runner = self._runner(slot, [unit.source.reference.parent])

        def waiting() -> list[ProblemSource]:  # asked only when a batch of audits is made
            return [u.source for u in self.units if u.ready.is_set() and u.ran is None]

        prepared = self.preparing.get(unit.source, runner, waiting)
        compiled: list[Baseline] = []
        cases, result = 0, unit.result
        if isinstance(prepared, UserError):  # refused: in a sweep, recorded as not judged
            if not (self.count_refused and isinstance(prepared, ProblemRefused)):
                with self.lock:
                    self._count_done(unit)
                self.report.dropped(unit)
                return
            result = Ended(failure(verdicts.PROBLEM_ERROR, f"not judged: {prepared}"))
        else:
            problem, cases = prepared
        if result is None:
            if self.session.settings.timing.compile:
                compiled = self._baselines(unit, problem, slot)
            on_event = self.report.judging(unit, slot.name)
            self.wait.mark("judging")
            more = len(self.units) - self.handed  # units no slot has taken yet
            ended = slot.run(unit.job, unit.folders, self._watching(on_event), more)
            judged = _with_builds(harness_checked(ended.judged, unit.job), unit.built)
            result = replace(ended, judged=judged)
        ran = self.session.record_for(unit.source, unit.job, result, cases, compiled)
        with self.lock:
            self.session.keep(ran)
            unit.ran = ran
            self._count_done(unit)
        again = self.session.announce(ran, unit.source, unit.solution, result)
        self.report.judged(unit, ran, again)

    def _count_done(self, unit: Unit) -> None:
        """One unit fewer left; in order, a problem's tables are made as its last unit is
        recorded, and in a sweep all at its end (`_close`), the run log read once."""
        name = unit.source.name
        self.left[name] -= 1
        recorded = (u.ran for u in self.units if u.source.name == name)  # read only in order
        if self.in_order and not self.left[name] and any(recorded):
            self.session.render([name])
            self.rendered.add(name)

    def _baselines(self, unit: Unit, problem: Problem, slot: Slot) -> list[Baseline]:
        """The problem's torch.compile baselines, timed once, on the first slot that needs them."""
        name = unit.source.name
        with self.lock:
            lock = self.baseline_locks.setdefault(name, threading.Lock())
        with lock:
            if name not in self.compiled:
                run_job = self._runner(slot, unit.folders)
                self.compiled[name] = self.session.compile_baselines(unit.source, problem, run_job)
        return self.compiled[name]

    def _first_slot(self, source: ProblemSource) -> Callable[[Job], Ended]:
        """Runs a job of `source`'s reference on the first slot (before any slot serves)."""
        return self._runner(self.pool.slots[0], [source.reference.parent])

    def _runner(self, slot: Slot, folders: list[Path]) -> Callable[[Job], Ended]:
        """Runs a job of the run's own (no solution's) on `slot`, its events unshown."""
        watch = self._watching(lambda e: None)
        return lambda job: self.wait.timed(lambda: slot.run(job, folders, watch))

    def _watching(self, on_event: OnEvent) -> OnEvent:
        """`on_event`, which stops the worker it watches once the run stops."""

        def watched(event: Event) -> None:
            if self.stop.is_set():
                raise Stopped
            on_event(event)

        return watched

    def _fail(self, error: BaseException) -> None:
        self.failure = self.failure or error
        self.stop.set()

    def _close(self) -> None:
        """Stop what still runs; re-render every table that gained a row and was not rendered
        yet (also on Ctrl-C)."""
        self.stop.set()
        self.report.close()
        with self.lock:
            touched = {u.source.name for u in self.units if u.ran} | self.resumed
            self.session.render(sorted(touched - self.rendered))

    def _outcome(self, work: Work, skipped: dict[tuple[str, Path], RunRecord]) -> Outcome:
        ran = {(u.source.name, u.solution): u.ran for u in self.units}
        outcome: Outcome = []
        for source, solutions in work:
            prepared = self.preparing.prepared.get(source.name)
            found = [skipped.get((source.name, s)) or ran.get((source.name, s)) for s in solutions]
            refused = prepared if isinstance(prepared, UserError) else None
            outcome.append(Judging(source, [r for r in found if r is not None], refused))
        return outcome


@dataclass(frozen=True)
class Judging:
    """One problem of a run, as it ended: its records (in its solutions' order, --resume's
    earlier ones too), and why the run refused it, if it did."""

    source: ProblemSource
    records: list[RunRecord]
    refused: UserError | None = None


def _with_builds(result: Judged, built: Ended | None) -> Judged:
    """The judge's result, with the builds its build job compiled (the judge found them)."""
    if built and any(not b.cached for b in built.judged.builds or ()):
        return replace(result, builds=built.judged.builds, build_s=built.judged.build_s)
    return result


if TYPE_CHECKING:
    from harness.run.session import Session

TOOLCHAIN = ("torch", "cuda", "gpu")  # of the machine, beside the settings' arch


def comparable(settings: Settings) -> codec.JsonObject:
    """The settings that decide a verdict and its numbers, as a JSON object."""
    data = codec.encode(settings)
    data.pop("places", None)
    data["checking"] = {k: v for k, v in data["checking"].items() if k != "secret"}
    data["device"] = str(data["device"]).partition(":")[0]  # cuda:1 and cuda:0 alike
    return data


class Earlier:
    """The session's results folder as the run began: its records, by solution content."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.settings = comparable(session.settings)
        self.toolchain = [getattr(session.machine, key) for key in TOOLCHAIN]
        log = session.folder / record.LOG_NAME
        self.by_content: dict[str, list[RunRecord]] = {}
        for ran in record.read(session.folder) if log.exists() else []:
            self.by_content.setdefault(ran.solution_hash, []).append(ran)

    def find(self, source: ProblemSource, solution: Path, content: str) -> RunRecord | None:
        """The newest record of this solution that the run would make again, or None."""
        reference = self.session.reference_hash(source)
        for ran in reversed(self.by_content.get(content, [])):
            if (
                ran.problem == source.name
                and ran.solution == solution.stem
                and ran.reference_hash == reference
                and [getattr(ran.machine, key) for key in TOOLCHAIN] == self.toolchain
                and comparable(ran.settings) == self.settings
            ):
                return ran
        return None
