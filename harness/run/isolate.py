"""Run one job in its own spawned process, with time limits, and always come back with a result.

The worker reports over a one-way pipe that only the harness writes to; whatever the solution
prints goes to the job's log instead. Whatever happens to the worker, a compile error, an
exception, a segfault, `os._exit`, a hang, this returns a Judged with a status. A worker
that fails before any of the solution's code runs (it cannot write its log, it dies while
starting) is the harness's failure, not the solution's: its result is marked `harness_error`
(harness.job.harness_failure), and the session records no verdict from it.

Time limits: the load step (import, where extensions usually build) and any build started later
get `build_s`; the check and time steps get `run_s` each.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from multiprocessing import resource_tracker
from pathlib import Path
from typing import Any

from harness import verdicts
from harness.job import (
    BuildEnd,
    BuildStart,
    Done,
    Ended,
    Event,
    Imported,
    Job,
    Judged,
    OnCase,
    Phase,
    ReadyToTime,
    Tick,
    Warm,
    Warmed,
    failure,
    harness_failure,
)
from harness.measure import directed, pch, worker
from harness.measure.worker import waiting
from harness.run import staging
from harness.run.processes import Held, end_tree
from harness.run.refereeing import Broken, Judge, RefereeFailed
from harness.settings import Limits

POLL_S = 0.25  # how often the parent looks at the worker
JOIN_S = 10.0  # how long a finished worker may take to exit


class Spare:
    """A worker started ahead of its job (harness.measure.worker): it imports torch and the
    harness (seconds) while the slot's current jobs run, warms up on the device when told (never
    while a job times), then waits for its job. It is the fresh process a job would get
    otherwise, with its start done, or under way; a spare that died meanwhile is not used."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        jobs, self.jobs = context.Pipe(duplex=False)
        self.receiver, sender = context.Pipe(duplex=False)
        self.scratch = staging.active.scratch() if staging.active else None
        process = context.Process(target=waiting, args=(jobs, sender), daemon=True)
        self.process = _started(process, self.scratch)
        jobs.close()
        sender.close()
        self.imported = False
        self.warming = False  # told to warm, Warmed not read yet
        self.warmed = False
        self.paused = False

    def usable(self) -> bool:
        return self.process.is_alive()

    def _read(self) -> None:
        """Take in what it said so far (Imported, Warmed); never waits."""
        with contextlib.suppress(EOFError, OSError):
            while self.usable() and self.receiver.poll(0):
                message = self.receiver.recv()
                if isinstance(message, Imported):
                    self.imported = True
                elif isinstance(message, Warmed):
                    self.warming, self.warmed = False, True

    def ready(self) -> bool:
        """Whether its imports are done (it said Imported); never waits."""
        self._read()
        return self.imported

    def warm(self, device: str) -> None:
        """Have it start CUDA on `device` now (the slot's job is not timing yet)."""
        self.jobs.send(Warm(device))
        self.warming = True

    def pause(self) -> None:
        """Stop it (SIGSTOP) while it imports or warms up: a timing runs on this host. Stopped
        between two system calls, it holds nothing the timed process needs; a warm-up resumes
        where it stopped, and one not done when its job comes is finished before the job."""
        self._read()
        if not self.paused and self.usable() and (self.warming or not self.imported):
            os.kill(self.process.pid, signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.paused and self.usable():
            os.kill(self.process.pid, signal.SIGCONT)
        self.paused = False

    def close(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(JOIN_S)
        self.receiver.close()
        self.jobs.close()
        if self.scratch is not None:  # a job's is removed as the job ends (staging.finish)
            shutil.rmtree(self.scratch, ignore_errors=True)


def run_isolated(
    job: Job,
    on_event: Callable[[Event], None],
    spare: Spare | None = None,
    before_timing: Callable[[], None] | None = None,
    held: Held | None = None,
) -> Ended:
    """Run `job` in a spawned worker (`spare`, where one is given and alive); `on_event` sees
    phase, case, build and tick events. Its result comes back wrapped in where the worker
    ended, however it ended: its last `phase` ("load", "check", "time") and the `case` (or
    benchmark) of that phase it had reached, or None; and the seconds spent in each phase
    (`phase_s`; in the sandbox, "stage" is the harness's copying in and out,
    harness.run.staging).
    `before_timing` runs when the worker is about to time, which it does once that returns.
    A build job's worker is in `held` while it runs (stopped while a timing runs)."""
    box = staging.active
    usable = spare is not None and spare.usable()
    if spare is not None and not usable:
        spare.close()
    scratch = spare.scratch if spare is not None and usable else None
    began = time.monotonic()  # staging in: the sandbox's copying, not a dead spare's close
    try:
        scratch = scratch or (box.scratch() if box else None)
        job = _directed(job, scratch)
        staged = staging.stage(job, scratch, box.links) if box and scratch else job
    except OSError as err:  # the harness's folder, not the solution: no verdict on it
        return Ended(harness_failure(f"cannot prepare the worker's scratch folder: {err}"))
    staging_s = time.monotonic() - began
    if spare is not None and usable:
        process, receiver, gate = spare.process, spare.receiver, spare.jobs
        gate.send(staged)
    else:
        process, receiver, gate = _spawned(staged, scratch)
    if held is not None:
        held.add(process.pid)
    log = Path(job.log_path) if scratch is None else scratch / "worker.log"
    judge = _judge(job, process, receiver, gate, log)

    def opened(event: Event) -> None:
        if scratch is not None:
            _serve(scratch, job, held)
        if isinstance(event, directed.Rounds):
            if judge is not None:
                _refereed(judge, process, lambda: judge.direct(event.spec))
            return
        if event == Phase("check") and judge is not None:  # it loaded: its referee will be needed
            _refereed(judge, process, judge.start)
        if isinstance(event, ReadyToTime):
            if judge is not None:
                _refereed(judge, process, lambda: judge.compare_evidence(final=False))
            if before_timing is not None:
                before_timing()
            gate.send("go")
        on_event(event)

    ended = Ended(harness_failure("the run stopped while its worker ran"))
    try:
        ended = _watch(process, receiver, job.settings.limits, opened, log)
        if judge is not None:
            ended = replace(ended, judged=_decided(judge, ended.judged))
    finally:
        if held is not None:
            held.discard(process.pid)
        _end(process)
        process.join(JOIN_S)
        receiver.close()
        gate.close()
        if judge is not None:
            judge.close()
            if scratch is None:
                shutil.rmtree(judge.evidence, ignore_errors=True)
        if scratch is not None:
            ended = _taken_out(job, process.pid, scratch, ended, staging_s)
    return ended


def _directed(job: Job, scratch: Path | None) -> Job:
    """A solution's job, directed (harness.run.refereeing): its evidence folder in its scratch
    folder (the sandbox's), else in a folder of its own; any other job as it is."""
    if job.task != "solution":
        return job
    evidence = scratch / "evidence" if scratch is not None else Path(tempfile.mkdtemp("-evidence"))
    return replace(job, directed=True, evidence=str(evidence))


def _judge(job: Job, process: Any, receiver: Any, gate: Any, log: Path) -> Judge | None:
    """The parent's evidence of a directed job (None for any other): its worker's messages
    during a sampling are read here, within the job's run limit."""
    if not job.directed:
        return None
    limit = job.settings.limits.run_s

    def receive(timeout: float) -> Any:
        if not receiver.poll(min(timeout, limit)):
            raise Broken(_timed_out("time", limit, None, "--timeout"))
        try:
            return receiver.recv()
        except (EOFError, OSError):
            raise Broken(_died(process, log, "time")) from None

    return Judge(job, process.pid, gate.send, receive, Path(job.evidence))


def _refereed(judge: Judge, process: Any, step: Callable[[], None]) -> None:
    """Run one step of the referee's; a broken protocol ends the worker with its verdict, a
    failure of the referee's ends it as the harness's."""
    try:
        step()
    except Broken as broken:
        judge.broken, judge.broken_own = broken.judged, broken.own
        _end(process)
    except RefereeFailed as failed:
        judge.broken = harness_failure(f"the referee failed: {failed}")
        _end(process)


def _decided(judge: Judge, judged: Judged) -> Judged:
    """The verdict the evidence supports (Judge.verdict), where the worker ended at `judged`."""
    try:
        return judge.verdict(judged)
    except RefereeFailed as failed:
        failure_ = harness_failure(f"the referee failed: {failed}")
        return replace(
            judged,
            status=failure_.status,
            detail=failure_.detail,
            harness_error=True,
            benchmarks=(),
        )


def _end(process: Any) -> None:
    """Kill a job's worker, and first what it started (ninja and its compilers, which a killed
    worker would leave running)."""
    if process.is_alive():
        end_tree(process.pid)
        process.kill()


def _serve(scratch: Path, job: Job, held: Held | None) -> None:
    """What a sandboxed worker's folder asks of the harness as it runs: its log followed, and
    a precompiled header its build wants made (a compile too: held as the builds are)."""
    with contextlib.suppress(OSError):  # its end says why, where it cannot be written
        staging.follow(scratch, job)
        maker = pch.answer(scratch, job.settings.places.build_dir)
        if maker is not None and held is not None:
            held.follow(maker)


def _spawned(staged: Job, scratch: Path | None) -> tuple[Any, Any, Any]:
    """A fresh worker for `staged` (through the sandbox's launcher with a `scratch` folder):
    the process, the end the parent reads from, and the gate it opens to let the job time."""
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    opening, gate = context.Pipe(duplex=False)
    args = (staged, sender, opening)
    process = _started(context.Process(target=worker.entry, args=args, daemon=True), scratch)
    sender.close()  # the parent keeps only the reading end, so EOF means the worker is gone
    opening.close()
    return process, receiver, gate


def _taken_out(job: Job, pid: int, scratch: Path, ended: Ended, staged_s: float) -> Ended:
    """After a sandboxed job: what its worker started killed, its log and build taken out
    (staging.finish), and the seconds of staging in (`staged_s`) and out as its "stage"
    phase."""
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)  # its group (the launcher's setpgid)
    began = time.monotonic()
    ended = replace(ended, judged=staging.finish(job, scratch, ended.judged))
    if ended.phase_s is None:
        return ended
    stage = round(staged_s + time.monotonic() - began, 3)
    return replace(ended, phase_s={**ended.phase_s, "stage": stage})


def _started(process: Any, scratch: Path | None = None) -> Any:
    """`process`, started with SIGINT blocked.

    Ctrl-C goes to the whole process group. A worker still importing torch (seconds) would die
    of it with a traceback on the terminal, so it starts with SIGINT blocked (the mask survives
    exec; multiprocessing's resource tracker starts the same way). Here a Ctrl-C pressed
    meanwhile stays pending, and is raised once the mask is restored. The tracker is started
    first: starting it unblocks SIGINT."""
    resource_tracker.ensure_running()
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        if scratch is not None and staging.active:  # through the sandbox's launcher
            staging.active.start(process, scratch)
        else:
            with staging.spawning():
                process.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    return process


def _watch(
    process: Any, receiver: Any, limits: Limits, on_event: Callable[[Event], None], log: Path
) -> Ended:
    phase, phase_start, build_start = "start", time.monotonic(), None
    case: str | None = None  # the case or benchmark of the phase that the worker is at
    spent: dict[str, float] = {}  # seconds in each phase, the current one until now
    entered = time.monotonic()

    def count(now: float) -> None:  # the current phase's seconds since `entered`
        spent[phase] = round(spent.get(phase, 0.0) + now - entered, 3)

    def at(judged: Judged) -> Ended:  # `judged`, with where the worker ended
        count(time.monotonic())
        return Ended(judged, phase=phase, case=case, phase_s=dict(spent))

    while True:
        if receiver.poll(POLL_S):
            try:
                message = receiver.recv()
            except (EOFError, OSError):
                return at(_died(process, log, phase))
            if isinstance(message, Imported | Warmed):  # a spare's, not yet read
                continue
            if isinstance(message, Done):
                return at(message.judged)
            if isinstance(message, Phase):
                now = time.monotonic()
                count(now)
                phase, phase_start, entered, case = message.phase, now, now, None
            elif isinstance(message, OnCase):
                case = message.name
            elif isinstance(message, BuildStart):
                build_start = time.monotonic()
            elif isinstance(message, BuildEnd):
                build_start, phase_start = None, time.monotonic()
            on_event(message)
        elif not process.is_alive():
            if receiver.poll():
                continue  # read what it sent before it exited
            return at(_died(process, log, phase))
        building = build_start is not None or phase in ("start", "load")
        limit = limits.build_s if building else limits.run_s
        flag = "--build-timeout" if building else "--timeout"  # the flag that sets `limit`
        started = build_start if build_start is not None else phase_start
        elapsed = time.monotonic() - started
        if elapsed > limit:
            _end(process)
            if phase == "start":  # the solution was not even imported: no verdict on it
                return Ended(harness_failure(f"the worker did not start within {limit:g} s"))
            step = "build" if build_start is not None else phase
            return at(_timed_out(step, limit, case, flag))
        on_event(_tick(phase, build_start is not None, elapsed, (limit, flag), case))


def _tick(
    phase: str, building: bool, elapsed: float, limit: tuple[float, str], case: str | None
) -> Event:
    """The event a watched worker's step sends each poll: how long it has run, its limit and
    the flag that sets it (`limit`), and the case a check is on."""
    seconds, flag = limit
    return Tick(phase, building, elapsed, seconds, flag, case)


def _timed_out(step: str, limit: float, case: str | None, flag: str) -> Judged:
    """The timeout verdict: which step, its limit, the case a check was on, and the flag."""
    where = f" in case {case!r}" if case is not None and step == "check" else ""
    detail = f"{step} step ran past its {limit:g} s limit{where} ({flag} SECONDS sets it)"
    return failure(verdicts.TIMEOUT, detail)


def _died(process: Any, log: Path, phase: str) -> Judged:
    """A worker that ended without a result: crashed, unless it died before it began its job
    (`phase` "start"), when no code of the solution had run: then a harness failure."""
    process.join(JOIN_S)
    code = process.exitcode
    if code is not None and code < 0:
        how = f"killed by {signal.Signals(-code).name}"
    else:
        how = f"exited with code {code} without reporting"
    clue = last_clue(log)
    ends = f"; log ends: {clue}" if clue else ""
    if phase == "start":
        return harness_failure(f"the worker {how} before it began its job{ends}")
    guess = "" if code is not None and code < 0 else " (os._exit?)"
    return failure(verdicts.CRASHED, f"worker {how}{guess}{ends}")


def last_clue(log: Path, max_chars: int = 160) -> str:
    """The most telling line near the end of a log: a fatal error, else the last error, or ''."""
    try:
        tail = log.read_text(errors="replace").splitlines()[-200:]
    except OSError:
        return ""
    lines = [line.strip() for line in tail if line.strip() and not line.startswith("job:")]
    fatal = [line for line in lines if line.startswith("Fatal Python error")]
    errors = [line for line in lines if "rror" in line]
    best = fatal[:1] or errors[-1:]
    return best[0][:max_chars] if best else ""
