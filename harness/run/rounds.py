"""The timing rounds the parent directs (harness.run.refereeing), and its clock's rule.

Each side of a sampling is a process: the referee holds the reference's, the worker the
solution's. `DirectedTimer` is a Timer of harness.measure.timing whose calls are RemoteSides:
each chunk of rounds goes to the two processes as one segment each, in the order the rounds
turn, both with the same sleep before each call, the worker stopped while the referee times;
the parent's clock spans every segment. After a sampling, each side makes bare batches of its
calls back to back, the two sides in turn (`Sampling.confirmed`): the parent's clock, less the
time the side waited in the run queue, must bear out the time per call the worker reported,
measured against what the reference's own batches show of its reported time, taken in the
same rounds.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from harness import stats, verdicts
from harness.job import Done, Judged
from harness.measure import directed, kernelbench
from harness.measure.timing import CudaTimer, Sampled
from harness.run import processes
from harness.settings import Settings
from harness.stats import Interval, Measurement

# Rounds per pair of segments (a segment of each side); on a CPU, turns of 4 rounds did not make
# back-to-back runs agree better (docs/timing.md, "Run to run on a CPU")
CHUNK_ROUNDS = 32
OTHERS_IGNORED = 0.05  # a share of the processors other processes took that widens nothing
# A CPU row's interval reaches at least this far either side of its speedup (a share of it):
# runs of one solution differ by more than one run's samples say, other processes or not
# (docs/timing.md, "Run to run on a CPU": about two standard deviations of 41 runs' speedups)
CPU_RUN_SPREAD = 0.3
OTHERS_MAX = 0.9  # the most a CPU row's interval is widened for (by 1 / (1 - 0.9) = 10x)
# A bare batch may take this many times the reported time per call, by where it ran, times
# what the reference's batch took over its own reported time (Sampling.allowance) ...
LIE_FACTORS = {"cpu": 7.0, "cuda": 1.5}
BARE_SLACK_US = 2000.0  # ... plus this (a message each way, the process's wake-up)
BARE_US = 20_000.0  # a bare batch makes about this much of reported time in calls ...
BARE_MAX_CALLS = 10_000  # ... and at most this many
BARE_BATCHES = 5  # bare batches a side makes in a try; the least counts
BARE_TRIES = 3  # tries of them, each after a pause, where the first scores over CLEAR_SCORES
BARE_PAUSE_S = 1.0
# A first try within this share of its bound decides alone: on a GPU any try borne out (its
# honest rows score about 0.65 there), on a CPU, whose load makes single tries wander, half
CLEAR_SCORES = {"cpu": 0.5, "cuda": 1.0}
SAMPLINGS = 2  # samplings of a benchmark, the second where the first was not borne out
REFEREE_START_S = 120.0  # the referee's start (imports, CUDA) and each of its answers, at most


class Broken(Exception):
    """The directed protocol failed: `judged` is the verdict to record instead (`own`: the
    worker's own final verdict, a failure it reported in place of an answer)."""

    def __init__(self, judged: Judged, own: bool = False) -> None:
        super().__init__(judged.detail)
        self.judged = judged
        self.own = own


@dataclass
class Segment:
    """One segment as the parent's clock saw it."""

    chunk: int
    side: str
    count: int
    wall_us: float
    claimed_us: float
    waits: bool
    checks: int = 0


@dataclass
class Sampling:
    """What the parent kept of one directed sampling: both sides' samples, each segment as its
    clock saw it, and the solution's bare batch (`bare`: calls, microseconds), if one ran."""

    spec: directed.Spec
    reference: Measurement
    solution: Measurement
    segments: list[Segment] = field(default_factory=list)
    bare: tuple[int, float] | None = None
    control: tuple[int, float] | None = None  # the reference's bare batch, at the referee
    others_share: float | None = None  # of the processors, other processes' while it sampled
    bare_others: float | None = None  # ... and while the bare batches ran (on a CPU)

    def ratio(self) -> float | None:
        """The solution's bare batch's time per call by the parent's clock, over its reported
        time per call."""
        return _ratio(self.bare, per_call_us(self.solution))

    def control_ratio(self) -> float | None:
        """The same ratio of the reference's bare batch, whose times are the referee's: what
        bare calls and the machine's load now do to a batch of reported calls."""
        return _ratio(self.control, per_call_us(self.reference))

    def speedup(self) -> Interval:
        """The kept samples' paired speedup. On a CPU its interval also holds across the
        rounds' drift (stats.blocked_ratio, by the rounds of a turn), is widened by what
        other processes took of the processors meanwhile (a share s of them can slow one side
        by up to 1 / (1 - s) and not the other: eager PyTorch's threads take every processor,
        a solution's may take one), and reaches CPU_RUN_SPREAD either side at least."""
        reference, solution = self.reference.times_us, self.solution.times_us
        if self.spec.timer == "kernelbench":
            return stats.mean_ratio(reference, solution)
        if self.spec.device != "cpu":
            return stats.paired_ratio(reference, solution)
        blocked = stats.blocked_ratio(reference, solution, CHUNK_ROUNDS)
        others = min(self.others_share or 0.0, OTHERS_MAX)
        if others < OTHERS_IGNORED:
            others = 0.0
        value = blocked.value
        low = min(blocked.low * (1 - others), value / (1 + CPU_RUN_SPREAD))
        return Interval(value, low, max(blocked.high / (1 - others), value * (1 + CPU_RUN_SPREAD)))

    def allowance(self) -> float:
        """How many times its reported time per call the solution's bare batch may take per
        call: LIE_FACTORS by device, times the reference's `control_ratio`. On a GPU the
        reference's ratio widens the bound where it is over 1 (the load now). On a CPU it
        scales the bound, up to 1: bare calls there run warmer than timed ones, and a sampling
        that other processes stretched stretched both sides' reports alike (their rounds
        alternate), which the reference's batch, its times the referee's, shows, so a report
        that load inflated earns no more room than the reference's."""
        control = self.control_ratio()
        control = 1.0 if control is None else control
        if self.spec.device == "cpu":
            return LIE_FACTORS["cpu"] * min(control, 1.0)
        return LIE_FACTORS["cuda"] * max(control, 1.0)

    def clear(self) -> bool:
        """Whether its `score` is low enough for one try to decide (CLEAR_SCORES)."""
        return self.score() <= CLEAR_SCORES["cpu" if self.spec.device == "cpu" else "cuda"]

    def score(self) -> float:
        """The solution's bare batch's time over the most it may take: `allowance` times its
        reported time per call, plus BARE_SLACK_US (0 without a batch; over 1: not borne out)."""
        if self.bare is None:
            return 0.0
        count, wall_us = self.bare
        return wall_us / (self.allowance() * count * per_call_us(self.solution) + BARE_SLACK_US)

    def confirmed(self) -> str | None:
        """None when the parent's clock bears out the solution's reported time (`score` 1 at
        most), else why not."""
        if self.bare is None or self.score() <= 1.0:
            return None
        count, wall_us = self.bare
        claimed = per_call_us(self.solution)
        busy = f", others {self.bare_others:.0%} of the processors" if self.bare_others else ""
        control = self.control_ratio()
        against = "" if control is None else f"; the reference's batch {control:.2f}x its own"
        return (
            f"benchmark {self.spec.bench!r} ({self.spec.kind}): {count} of its calls back to back "
            f"took {wall_us / count:.4g} us each by the harness's clock, outside its process, "
            f"against the {claimed:.4g} us it reported ({self.ratio():.1f}x{against}{busy}): "
            "its report is not its own"
        )


def per_call_us(measured: Measurement) -> float:
    """What one timed call costs by a side's report: its median, or its host time where that
    is longer (a call whose launches outlast its kernels)."""
    return max(measured.median_us, measured.host_us or 0.0)


def _ratio(batch: tuple[int, float] | None, per_call_us: float) -> float | None:
    if batch is None:
        return None
    count, wall_us = batch
    return wall_us / count / max(per_call_us, 1e-3)


def bare_count(claimed_us: float) -> int:
    """How many calls a bare batch makes: about BARE_US of them, within 1 and BARE_MAX_CALLS."""
    return max(1, min(BARE_MAX_CALLS, math.ceil(BARE_US / max(claimed_us, 1.0))))


class RemoteSide:
    """One process's side of a sampling, as timing.sample sees a call: `segment` sends it a
    Segment and times the answer with the parent's clock."""

    def __init__(
        self,
        name: str,
        send: Callable[[Any], None],
        receive: Callable[[float], Any],
        paused: Callable[[bool], None] | None = None,
        pid: int | None = None,
    ) -> None:
        self.name = name
        self.send = send
        self.receive = receive
        self.paused = paused  # stops the worker while this side times, and lets it go after
        self.pid = pid  # the side's process, whose time in the run queue the clock leaves out

    def __call__(self) -> object:  # timing.sample's calls are run by DirectedTimer alone
        raise TypeError("a remote side is timed by DirectedTimer")

    def segment(self, count: int, cover_us: float | None, first: bool) -> tuple[Any, float]:
        """`count` timed calls: the side's answer, and the parent's clock around it."""
        answer, wall_us = self.ask(directed.Segment(count, cover_us, first), "timed calls")
        if len(answer.times_us) != count:
            self._refused(answer, "timed calls")
        return answer, wall_us

    def ask(self, request: Any, asked: str) -> tuple[directed.Timed, float]:
        """`request`'s Timed answer, and the parent's clock around it (microseconds), less the
        time the side's main thread waited in the run queue meanwhile: on a busy machine that
        is other processes' time, not the side's."""
        if self.paused is not None:
            self.paused(True)
        try:
            queued = run_queue_ns(self.pid)
            begin = time.perf_counter()
            self.send(request)
            answer = self.receive(REFEREE_START_S)
            wall_us = (time.perf_counter() - begin) * 1e6
            # the kernel counts a wait when it ends: one that began before `begin` can make
            # the difference exceed the wall time, which stays 0 at least
            wall_us = max(wall_us - (run_queue_ns(self.pid) - queued) / 1e3, 0.0)
        finally:
            if self.paused is not None:
                self.paused(False)
        if not isinstance(answer, directed.Timed):
            self._refused(answer, asked)
        return answer, wall_us

    def _refused(self, answer: Any, asked: str) -> NoReturn:
        if isinstance(answer, Done) and self.name == "worker" and not answer.judged.ok:
            raise Broken(answer.judged, own=True)  # it failed while timed: a spot check, say
        if self.name == "referee":
            raise RefereeFailed(f"the referee answered {shown(answer)}")
        raise Broken(reject("report_unconfirmed", _out_of_turn(answer, asked)))


def run_queue_ns(pid: int | None) -> int:
    """How long process `pid`'s main thread has waited in the run queue so far, in nanoseconds,
    as the kernel accounts it (/proc/PID/schedstat); 0 where that cannot be read."""
    if pid is None:
        return 0
    try:
        with open(f"/proc/{pid}/schedstat", encoding="ascii") as stat:
            return int(stat.read().split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def cpu_ns(pid: int | None) -> int:
    """The processor time every thread of process `pid` has taken so far, in nanoseconds, as
    the kernel accounts it (/proc/PID/task/*/schedstat); 0 where that cannot be read."""
    if pid is None:
        return 0
    total = 0
    for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        try:
            total += int(stat.read_text(encoding="ascii").split()[0])
        except (OSError, IndexError, ValueError):
            continue
    return total


class DirectedTimer:
    """A Timer (harness.measure.timing) whose calls are RemoteSides: each chunk of rounds goes
    to the two processes as one segment each, in the order the rounds turn; the parent's clock
    is kept for every segment (`segments`)."""

    def __init__(self, method: str, sides: dict[str, RemoteSide], gpu: bool) -> None:
        self.method = method
        self.sides = sides
        self.gpu = gpu
        self.host_us: dict[str, float] = {}
        self.synchronizing: dict[str, bool] = {}
        self.segments: list[Segment] = []
        self.chunk = 0
        self.others = OthersShare([side.pid for side in sides.values()])

    def run(self, calls: list[Any]) -> list[float]:
        names = [getattr(call, "name", "") for call in calls]
        times: list[float] = [0.0] * len(calls)
        for start in range(0, len(calls), 2 * CHUNK_ROUNDS):
            block = range(start, min(start + 2 * CHUNK_ROUNDS, len(calls)))
            order = list(dict.fromkeys(names[i] for i in block))
            for name in order:
                places = [i for i in block if names[i] == name]
                answer, wall_us = self.sides[name].segment(
                    len(places), self.cover(), not self.segments
                )
                for place, value in zip(places, answer.times_us, strict=True):
                    times[place] = value
                self._kept(name, answer, wall_us)
            self.chunk += 1
        return times

    def cover(self) -> float | None:
        """The sleep before each call, the same for both sides: enough for the slower host."""
        if not self.gpu or self.method != "cuda_events":
            return None
        return CudaTimer.cover_us(max(self.host_us.values(), default=50.0))

    def _kept(self, name: str, answer: directed.Timed, wall_us: float) -> None:
        if answer.host_us is not None:
            self.host_us[name] = answer.host_us
        if answer.waits is not None:
            self.synchronizing[name] = answer.waits
        claimed = sum(answer.times_us)
        waits = bool(answer.waits)
        count = len(answer.times_us)
        checks = answer.checks if name == "solution" else 0
        self.segments.append(Segment(self.chunk, name, count, wall_us, claimed, waits, checks))


class OthersShare:
    """The share of this machine's processors that processes other than the run's own took
    since it was made: the busy time the kernel counts for all processors (/proc/stat), less
    the run's own processor time, over the wall time times the processors. The run's own: this
    process, `pids` (the worker, the referee) and every process below this one (what they
    started; orphans, run.py being their subreaper), so that a solution's own processes never
    count as another's load. None where the kernel does not say, or over less than
    OTHERS_MIN_S."""

    def __init__(self, pids: list[int | None]) -> None:
        self.pids = [os.getpid(), *(pid for pid in pids if pid is not None)]
        self.began = time.monotonic()
        self.busy = machine_busy_ns()
        self.own = self.own_ns()

    def own_ns(self) -> dict[int, int]:
        """Each of the run's own processes' processor time so far, by pid."""
        below = {*processes.tree(os.getpid(), processes.children()), *self.pids}
        return {pid: cpu_ns(pid) for pid in below}

    def others_ns(self) -> int | None:
        """Processor time other processes took since it was made (None where unknown): what
        the run's own took meanwhile is what each of its processes alive now took since then
        (all of it for one started since)."""
        busy = machine_busy_ns()
        if busy is None or self.busy is None:
            return None
        now = self.own_ns()
        own = sum(spent - self.own.get(pid, 0) for pid, spent in now.items())
        return (busy - self.busy) - own

    def share(self) -> float | None:
        """others_ns over the wall time times the processors, within 0 and 1."""
        others, wall_ns = self.others_ns(), (time.monotonic() - self.began) * 1e9
        if others is None or wall_ns < OTHERS_MIN_S * 1e9:
            return None
        return min(max(others / (wall_ns * (os.cpu_count() or 1)), 0.0), 1.0)


OTHERS_MIN_S = 0.2  # /proc/stat counts in ticks of 10 ms: over less, the share says little
TICK_NS = 1e9 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)


def machine_busy_ns() -> int | None:
    """The time every processor of this machine has spent busy (not idle, not waiting on a
    disk), in nanoseconds, as /proc/stat counts it; None where it cannot be read."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(n) for n in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    if len(fields) < 5:
        return None
    idle = fields[3] + fields[4]  # idle and iowait
    return int((sum(fields[:8]) - idle) * TICK_NS)  # user to steal; guests are inside user


def reject(rule: str, detail: str) -> Judged:
    """The `rejected` verdict of rule `rule` (one of harness.verdicts.REJECTIONS)."""
    if rule not in verdicts.REJECTIONS:
        raise ValueError(f"{rule!r} is not a rule of harness.verdicts.REJECTIONS")
    return Judged(verdicts.REJECTED, f"{detail} [rule: {rule}]", reason=rule)


def _out_of_turn(answer: Any, asked: str) -> str:
    """Why a worker's answer to a request for `asked` is refused."""
    if isinstance(answer, Done):
        status = answer.judged.status
        return f"the worker sent a final report ({status}) in place of the {asked} it was asked for"
    return f"the worker answered {shown(answer)} in place of the {asked} it was asked for"


def shown(answer: Any) -> str:
    text = repr(answer)
    return text if len(text) <= 80 else text[:77] + "..."


def kernelbench_sampled(
    sides: dict[str, RemoteSide], settings: Settings, timer: DirectedTimer
) -> Any:
    """KernelBench's timing, directed: each side on its own, the solution first."""
    trials = settings.checking.kernelbench_trials or kernelbench.TRIALS
    count = trials + kernelbench.DISCARDED
    measured = {}
    for name in ("solution", "reference"):
        answer, wall_us = sides[name].segment(count, None, True)
        timer._kept(name, answer, wall_us)
        times = answer.times_us[kernelbench.DISCARDED :]
        measured[name] = Measurement(tuple(times), "kernelbench")
    return Sampled(
        {"reference": measured["reference"], "solution": measured["solution"]},
        "kernelbench",
        [trials],
    )


class RefereeFailed(Exception):
    """The referee failed: the harness's failure, never the solution's."""
