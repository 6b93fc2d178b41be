"""Where jobs run on this host: builds in a pool of worker processes sized to the cores, and
judging on one slot per device, each slot running one job at a time.

A build job (harness.measure.worker.build_only) sees no GPU, so builds never share a device with
a timing. A slot's device is the only one its jobs use: with `--gpus 0,1` two solutions are
judged at once, each timed on a GPU of its own. harness.run.raypool has the same interface on a
Ray cluster.

The pool's builds, held still while a timing runs, so that a run can judge while it builds.

"""

from __future__ import annotations

import dataclasses
import os
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import torch

from harness.job import Ended, Event, Job, OnEvent
from harness.record import Machine
from harness.run import isolate, machine, staging
from harness.run.processes import Held, can_hold
from harness.settings import REPO
from harness.verdicts import UserError

COMPILES_PER_BUILD = "2"  # MAX_JOBS: the compile steps one build runs at once (ninja -j)
# Spare workers a GPU slot keeps started ahead of its jobs (`spares_ahead`): a spare's imports
# and warm-up (harness.measure.worker) take longer than a job's check and timing; they go on
# only while no timing runs (paused during one), several at once, so each has the windows of
# the jobs before its own (docs/scale.md: with fewer, the spares set a sweep's pace).
SPARES_MAX = 10
GIB_PER_SPARE = 8  # a warm spare holds a CUDA context (about 0.5 GB): one per 8 GiB at most
SPARES_VARIABLE = "HARNESS_SPARES"  # where set, the spares each GPU slot keeps (docs/scale.md)


def execute(
    job: Job,
    folders: list[Path],
    on_event: OnEvent,
    spare: isolate.Spare | None = None,
    before_timing: Callable[[], None] | None = None,
    held: Held | None = None,
) -> Ended:
    """Run `job` in a worker (`spare`, where given); a module it planted where Python imports
    from (`folders`, and this process's import path) is removed, and rejects it
    (harness.run.staging), however the job ended (also when the run stops it)."""
    watched = staging.ImportPath(folders)
    try:
        result = isolate.run_isolated(job, on_event, spare, before_timing, held)
    finally:
        planted = watched.remove_planted()
    if planted:
        result = dataclasses.replace(result, judged=staging.rejected(result.judged, planted))
    return result


def on_device(job: Job, device: str) -> Job:
    """`job`, run on `device` (a slot's), everything else as the run set it."""
    return dataclasses.replace(job, settings=dataclasses.replace(job.settings, device=device))


class LocalSlot:
    """One device of this host that judges one job at a time."""

    def __init__(
        self, device: str, held: Held | None = None, ahead: int | None = None, sharing: int = 1
    ) -> None:
        """`ahead`: the spares it keeps (default `spares_ahead` for its GPU, the host's cores
        shared by `sharing` slots)."""
        self.device = device
        self.name = device
        self.ahead, self.sharing = ahead, sharing
        self.held = held  # the pool's builds, stopped while this slot times
        self._holding = False
        self._described: Machine | None = None
        # On a GPU, the next jobs' workers start while this one runs: their imports then cost
        # the slot nothing. Not on a CPU, where they would share the cores a timing runs on.
        self.spares = device != "cpu"
        self._ahead: deque[isolate.Spare] = deque()  # the next jobs' workers, in order
        self._timing = False  # the current job passed its gate: nothing may warm up

    def machine(self) -> Machine:
        """The machine as this slot's device sees it (GPU, driver, host...), read once."""
        if self._described is None:
            self._described = machine.describe(torch.device(self.device), REPO)
        return self._described

    def run(self, job: Job, folders: list[Path], on_event: OnEvent, more: int = 1) -> Ended:
        """Run `job` on this slot's device; how it ended carries the machine and its load as the
        job began (`machine`). `more`: how many jobs may follow (not yet taken by any slot),
        for which spare workers start, `ahead` at most; with none, those left are closed."""
        where = machine.loaded(self.machine(), torch.device(self.device))
        spare = self._ahead.popleft() if self._ahead else None
        self._timing = False
        if self.spares and more:
            if self.ahead is None:
                memory = self.machine().memory_bytes
                self.ahead = spares_ahead(memory, os.cpu_count(), self.sharing)
            wanted = min(self.ahead, more)
            while len(self._ahead) > wanted:  # more than the jobs left could use
                self._ahead.pop().close()
            while len(self._ahead) < wanted:
                self._ahead.append(isolate.Spare())
            on_event = self._warming_ahead(on_event)
        else:
            self.close()
        job = on_device(job, self.device)
        try:
            result = execute(job, folders, on_event, spare, self._before_timing)
        finally:
            if self._holding and self.held is not None:
                self.held.release()
            self._holding = False
            for waiting in self._ahead:
                waiting.resume()
        return dataclasses.replace(result, machine=where)

    def _warming_ahead(self, on_event: OnEvent) -> OnEvent:
        """`on_event`, which has the spares warm up on the device once their imports are done,
        while this job is not timing yet (each event, a Tick at least every POLL_S)."""

        def seen(event: Event) -> None:
            if not self._timing:
                for spare in self._ahead:
                    if not (spare.warming or spare.warmed) and spare.ready():
                        spare.warm(self.device)
            on_event(event)

        return seen

    def _before_timing(self) -> None:
        """The current job is about to time: the spares still importing or warming up are
        paused until the job ends (none is waited for), so that the host and the device are as
        quiet during a timing as with no spares at all."""
        self._timing = True
        if self.held is not None and not self._holding:
            self.held.hold()
            self._holding = True
        for waiting in self._ahead:
            waiting.pause()

    def close(self) -> None:
        while self._ahead:
            self._ahead.popleft().close()


class LocalPool:
    """Builds in `build_jobs` worker processes at once; one slot per device in `devices`."""

    def __init__(self, devices: list[str], build_jobs: int) -> None:
        # Builds are stopped while a slot times (harness.run.isolate), so that judging need
        # not wait for them; where they cannot be, a run that times waits for every build.
        self.held = Held() if can_hold() else None
        ahead, sharing = spares_set(), len(devices)
        self.slots = [LocalSlot(device, self.held, ahead, sharing) for device in devices]
        self.build_jobs = build_jobs
        os.environ.setdefault("MAX_JOBS", COMPILES_PER_BUILD)  # workers inherit it
        self._builder = ThreadPoolExecutor(build_jobs, thread_name_prefix="build")

    def build(self, job: Job, folders: list[Path], on_event: OnEvent) -> Future[Ended]:
        """Start the build job of a solution (task "build"); its result when it is done."""
        return self._builder.submit(execute, job, folders, on_event, held=self.held)

    @property
    def holds_builds(self) -> bool:
        return self.held is not None

    def built(self, job: Job) -> bool:
        """Whether the solution's build is whole in the cache, so that a build job would only
        load it (a worker's start, seconds): known in the sandbox, where the harness publishes
        each build with its modules' digests and stages it for the judge (staging.intact)."""
        return staging.active is not None and staging.intact(staging.cache_folder(job))

    def close(self) -> None:
        """Drop the builds not started (the running ones end with their workers), and the
        slots' spare workers."""
        self._builder.shutdown(wait=False, cancel_futures=True)
        for slot in self.slots:
            slot.close()
        if self.held is not None:  # a build stopped as the run stops goes on, and ends
            self.held.close()
        staging.end()  # the run's, where it had one


def spares_ahead(memory_bytes: int | None, cores: int | None, slots: int) -> int:
    """The spare workers a GPU slot keeps: SPARES_MAX at most, one per GIB_PER_SPARE of its
    GPU's memory (each warm one holds a context there), one per core of the host's share
    (`slots` share them; each imports on one, never while a timing runs), and at least one."""
    by_memory = (memory_bytes or 0) // (GIB_PER_SPARE << 30)
    by_cores = (cores or 1) // max(1, slots)
    return max(1, min(SPARES_MAX, by_memory, by_cores))


def spares_set() -> int | None:
    """The spares a GPU slot keeps as SPARES_VARIABLE sets them, or None where it is not set."""
    text = os.environ.get(SPARES_VARIABLE, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise UserError(f"{SPARES_VARIABLE}={text!r}: give a whole number, 1 or more, or unset it")
    return int(text)


def build_jobs(requested: int | None) -> int:
    """How many builds run at once: `requested`, else one per two cores (each build compiles
    its C++ and CUDA files side by side: COMPILES_PER_BUILD), at least one."""
    return requested or max(1, (os.cpu_count() or 1) // int(COMPILES_PER_BUILD))


def gpu_devices(requested: str | None, default: str) -> list[str]:
    """The devices to judge on: `default` (the run's --device) unless --gpus names some: `all`
    or a list of indices (`0,1`)."""
    if requested is None:
        return [default]
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if visible == 0:
        raise UserError(f"--gpus {requested}: no CUDA device is visible here; drop --gpus")
    if requested == "all":
        return [f"cuda:{i}" for i in range(visible)]
    try:
        indices = [int(part) for part in requested.split(",")]
    except ValueError:
        raise UserError(f"--gpus {requested!r}: give 'all' or GPU indices such as 0,1") from None
    bad = [i for i in indices if not 0 <= i < visible]
    if bad or len(set(indices)) != len(indices):
        raise UserError(
            f"--gpus {requested}: {visible} GPU(s) visible (0 to {visible - 1}); name each "
            "at most once"
        )
    return [f"cuda:{i}" for i in indices]
