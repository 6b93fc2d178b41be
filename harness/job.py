"""The job contract: what the parent asks of a worker, and everything that comes back.

`Job` is what a worker is given: the problem, the solution, the run's settings whole, and its
task (judge a solution; "build" it alone; or one of REFERENCE_TASKS, which run the reference
only). `Judged` is what a job ended with, as the parent reads it: one type for every job,
however it ended (a verdict, a crash or a timeout written by the parent, a job that needed no
worker). The parent wraps it in an `Ended` with what it adds: where the worker ended (`phase`,
`case`, `phase_s`) and where it ran (`machine`); the run's record is made from that
(harness.run.session.Session.record_for). The jobs that run
no solution answer in fields of their own: `audits` (each an `Audited`), `ceiling`,
`compile_rows` and `compile_untimed`.

What a worker tells the parent while it works: one frozen type per kind of message, sent whole
through the worker's pipe (harness.run.isolate reads them, harness.run.progress shows them).
The job's end is `Done`, carrying its Judged; the parent adds `Tick`s of its own. A spare
worker (harness.measure.worker) says `Imported` once its imports are done; it may then be told
`Warm` before its job, and answers `Warmed`.

Imports no torch: the parent's modules (harness/run/) and the tests read the contract without
loading a GPU library (tests/test_layout.py checks it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness import verdicts
from harness.record import BenchRow, Build, Ceiling, CompiledRow, Finding, Machine
from harness.settings import Settings

REFERENCE_TASKS = ("compile_baseline", "audit", "ceiling")  # jobs that run no solution


@dataclass(frozen=True)
class Job:
    """Everything a worker needs: what to run, and the run's settings, whole."""

    problem: str
    reference: str
    solution: str
    log_path: str
    content_hash: str
    settings: Settings
    task: str = "solution"  # else "build", the load step alone, without a GPU (harness.run.pool's
    # build jobs), or one of REFERENCE_TASKS
    # An "audit" job's problems, (name, reference file) each; none: the job's own problem alone
    sources: tuple[tuple[str, str], ...] = ()
    # Where it builds, when not its folder of the build cache (the sandbox's: run.staging)
    build_folder: str = ""
    # Directed: a referee holds the reference's side; the parent directs the timing rounds
    # over the gate, and the checks' outputs go to `evidence` (harness.measure.directed)
    directed: bool = False
    evidence: str = ""


@dataclass(frozen=True)
class Audited:
    """One problem's audit: its findings, or why it could not be audited."""

    findings: tuple[Finding, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class Judged:
    """A job's result (the module doc)."""

    status: str
    detail: str = ""
    checks: int = 0  # correctness checks passed
    benchmarks: tuple[BenchRow, ...] = ()  # none for a failed solution
    warnings: tuple[str, ...] = ()
    reason: str | None = None  # the rule a rejection broke (harness.verdicts)
    device: str | None = None  # where it ran, when not the run's device
    builds: tuple[Build, ...] | None = None  # the extensions it built or loaded
    build_s: float | None = None
    own_share: float | None = None  # of its device time, in kernels of its own
    reference_share: float | None = None  # ... in kernels the reference launches too
    harness_error: bool = False  # the harness failed the job: no verdict on the solution
    parts_s: dict[str, float] | None = None  # the seconds of each part of judging (harness.stats)
    audits: dict[str, Audited] | None = None  # task "audit": by problem
    ceiling: Ceiling | None = None  # task "ceiling"
    compile_rows: tuple[CompiledRow, ...] = ()  # task "compile_baseline"
    compile_untimed: dict[str, str] | None = None  # ... by row name, why a row was not timed

    @property
    def ok(self) -> bool:
        return self.status == verdicts.OK


@dataclass(frozen=True)
class Ended:
    """A job as the parent saw it end: its result (the worker's own, or one the parent wrote
    for a worker that crashed, hung or never started), and around it what the parent adds,
    never written into it: where the worker ended and where it ran."""

    judged: Judged
    phase: str | None = None  # where the worker ended: its phase, the case it was on,
    case: str | None = None
    phase_s: dict[str, float] | None = None  # and the seconds of each phase
    machine: Machine | None = None  # the machine it ran on, with its load then


def failure(verdict: str, detail: str) -> Judged:
    """A verdict without measurements."""
    return Judged(verdict, detail)


def harness_failure(detail: str) -> Judged:
    """The result of a job the harness itself failed (its folders, a bug of its own): marked
    `harness_error`, so the session stops the run instead of recording it as a verdict."""
    return Judged(verdicts.RUNTIME_ERROR, f"harness error: {detail}", harness_error=True)


@dataclass(frozen=True)
class Phase:
    """The worker entered a phase: "load", "check" or "time"."""

    phase: str


@dataclass(frozen=True)
class Count:
    """A phase's count of what it has done (benchmarks timed), out of `total`."""

    done: int
    total: int


@dataclass(frozen=True)
class OnCase:
    """The case or benchmark the current phase is on."""

    name: str


@dataclass(frozen=True)
class BuildStart:
    """An extension build began; `found`: its module lies in its folder (likely only a load)."""

    name: str
    cuda: bool = False
    found: bool = False


@dataclass(frozen=True)
class BuildEnd:
    """An extension build ended; `cached`: nothing was compiled; `hint`: how it could build
    faster (harness.measure.builds.slow_header)."""

    name: str
    seconds: float = 0.0
    cached: bool = False
    hint: str | None = None


@dataclass(frozen=True)
class ReadyToTime:
    """The worker waits for the parent's word before it times (harness.run.pool's gate)."""


@dataclass(frozen=True)
class Done:
    """The job's result: the worker's last message."""

    judged: Judged


@dataclass(frozen=True)
class Tick:
    """The parent's, each poll of a worker: how long its step has run, the limit that stops it
    and the flag that sets that limit, and the case a check is on."""

    phase: str
    building: bool = False
    elapsed: float = 0.0
    limit: float | None = None
    flag: str | None = None
    case: str | None = None


@dataclass(frozen=True)
class Imported:
    """From a spare worker: its imports are done; it touched no device yet."""


@dataclass(frozen=True)
class Warm:
    """To a spare worker: start CUDA on `device` now, before the job comes."""

    device: str


@dataclass(frozen=True)
class Warmed:
    """A spare's answer to Warm: why warming failed, or None."""

    error: str | None = None


Event = Phase | Count | OnCase | BuildStart | BuildEnd | ReadyToTime | Done | Tick
OnEvent = Callable[[Event], None]
