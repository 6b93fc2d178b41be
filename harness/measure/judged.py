"""What a worker's job ended with, as the parent reads it: one type for every job, however it
ended (a verdict, a crash or a timeout written by the parent, a job that needed no worker).

It crosses the worker's pipe and Ray pickled, whole; the parent adds where the worker ended
(`phase`, `case`, `phase_s`) and where it ran (`machine`), and the run's record takes its
fields from it (harness.run.session). The jobs that run no solution (the reference tasks of
harness.measure.worker) answer in fields of their own: `audits`, `ceiling`, `compile_rows`.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness import status
from harness.measure.audit import Audited
from harness.record import BenchRow, Build, Ceiling, CompiledRow, Machine


@dataclass(frozen=True)
class Judged:
    """A job's result (the module doc)."""

    status: str
    detail: str = ""
    checks: int = 0  # correctness checks passed
    benchmarks: tuple[BenchRow, ...] = ()  # none for a failed solution
    warnings: tuple[str, ...] = ()
    reason: str | None = None  # the rule a rejection broke (harness.rules)
    device: str | None = None  # where it ran, when not the run's device
    builds: tuple[Build, ...] | None = None  # the extensions it built or loaded
    build_s: float | None = None
    own_share: float | None = None  # of its device time, in kernels of its own
    reference_share: float | None = None  # ... in kernels the reference launches too
    harness_error: bool = False  # the harness failed the job: no verdict on the solution
    phase: str | None = None  # where the worker ended: its phase, the case it was on,
    case: str | None = None
    phase_s: dict[str, float] | None = None  # and the seconds of each phase
    parts_s: dict[str, float] | None = None  # and of each part within them (harness.parts)
    machine: Machine | None = None  # the machine it ran on, with its load then
    ray_log: bytes | None = None  # the end of its log, on its way back from a Ray host
    audits: dict[str, Audited] | None = None  # task "audit": by problem
    ceiling: Ceiling | None = None  # task "ceiling"
    compile_rows: tuple[CompiledRow, ...] = ()  # task "compile_baseline"

    @property
    def ok(self) -> bool:
        return self.status == status.OK


def failure(verdict: str, detail: str) -> Judged:
    """A verdict without measurements."""
    return Judged(verdict, detail)


def harness_failure(detail: str) -> Judged:
    """The result of a job the harness itself failed (its folders, a bug of its own): marked
    `harness_error`, so the session stops the run instead of recording it as a verdict."""
    return Judged(status.RUNTIME_ERROR, f"harness error: {detail}", harness_error=True)
