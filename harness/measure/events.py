"""What a worker tells the parent while it works, one frozen type per kind of message, sent
whole through the worker's pipe (harness.run.isolate reads them, harness.run.progress shows
them). The job's end is `Done`, carrying its Judged; the parent adds `Tick`s of its own.

A spare worker (harness.measure.spare) says `Imported` once its imports are done; it may then
be told `Warm` before its job, and answers `Warmed`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # not at run time: harness.run.progress imports this without torch
    from harness.measure.judged import Judged


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
