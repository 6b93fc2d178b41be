"""Fresh inputs for every timed call, and spot checks of the solution's timed outputs.

A `Feed` holds a few input sets of one side (reference or solution), drawn from the benchmark's
generator. Before each timed call, outside the timed region, it picks one set at random, swaps
two values within one row of the set's first floating-point input, so no two calls see the
same inputs (an output cached by pointer, shape or content is stale on the next call), and
copies the set: the pristine inputs, should the call be checked.

A `SpotChecker` decides after each of the solution's timed calls, at random (more of the early
ones), whether to check it: the output against the reference on the pristine copy, by the
checks' rule (the tolerance, or the accuracy rule against float64), and the rules of
harness.measure.anticheat (no aliasing, inputs unchanged, a plain tensor). Deciding afterwards, with
every call's inputs copied alike, leaves a call nothing to tell whether it will be checked.

Both draw from the operating system's generator (`random.SystemRandom`), not a seeded one: a
seeded generator's state lies in the process, where a solution could clone it and foresee which
two values each call swaps (and patch a cached output instead of computing), or which calls are
checked. The sets themselves come from the run's seeds. Each set's fingerprint (the multiset of
its values, which swaps keep) is taken when the feed is made and compared at every check: a
solution that overwrote a set, or the pristine copy, through gc or its callers' frames, is
rejected ("harness_data_changed").

The wall-clock cross-check after the timing: the solution's calls back to back, waiting for
the whole device and every thread after each batch. A solution whose work the timer did not see
(launched on another stream, left to a thread) is rejected as "unseen_work"
(harness.measure.benchmarking runs it on each row).
"""

from __future__ import annotations

import copy
import math
import random
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from harness import verdicts
from harness.loading import replicate, replicate_all
from harness.measure import anticheat
from harness.stats import part
from harness.verdicts import Verdict

# (output, pristine inputs, label) -> raises on a mismatch
Check = Callable[[Any, list[Any], str], None]


def perturb(inputs: list[Any], rng: random.Random) -> None:
    """Swap two values within one row (along the last dimension) of the first floating-point
    input tensor that has a row of at least two values and no overlapping memory."""
    for tensor in inputs:
        if (
            not isinstance(tensor, torch.Tensor)
            or not tensor.is_floating_point()
            or tensor.dim() == 0
            or tensor.shape[-1] < 2
            or tensor.numel() == 0
            or 0 in tensor.stride()
        ):
            continue
        row = tuple(rng.randrange(size) for size in tensor.shape[:-1])
        first, second = rng.sample(range(tensor.shape[-1]), 2)
        at_first, at_second = (*row, first), (*row, second)
        held = tensor[at_first].clone()
        tensor[at_first] = tensor[at_second]
        tensor[at_second] = held
        return


class SpotChecker:
    """Decides which timed calls to check, after each ran, and checks them (see the module doc)."""

    EARLY_CALLS = 64  # the first calls are checked with EARLY_P, later ones with LATE_P
    EARLY_P = 1 / 8
    LATE_P = 1 / 64
    MAX_CHECKS = 24

    def __init__(
        self,
        check: Check,
        device: torch.device,
        label: str,
        rng: random.Random | None = None,
    ) -> None:
        self.check = check
        self.device = device
        self.label = label
        self.rng = rng or random.SystemRandom()
        self.calls = 0
        self.checked = 0
        self.forced = 0

    def force(self, count: int) -> None:
        """Check the next `count` calls judged, whatever the dice say."""
        self.forced += count

    def judge(self, ran: Ran) -> None:
        """After a timed call: maybe check it (waits for the device when it does)."""
        self.calls += 1
        chance = self.EARLY_P if self.calls <= self.EARLY_CALLS else self.LATE_P
        if self.forced > 0:
            self.forced -= 1
        elif self.checked >= self.MAX_CHECKS or self.rng.random() >= chance:
            return
        with part("spot_check"):
            self._check(ran)

    def _check(self, ran: Ran) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        label = f"{self.label}, timed call {self.calls}"
        if anticheat.fingerprint(ran.pristine) != ran.drawn:
            raise anticheat.reject(
                "harness_data_changed",
                f"{label}: its inputs no longer hold the values the harness drew for them: a "
                "call wrote to its inputs, or to the harness's copy of them",
            )
        anticheat.require_plain(ran.output, label)
        anticheat.check_call(
            anticheat.Call(ran.given, ran.output), ran.pristine, ran.pristine, label
        )
        self.check(ran.output, ran.pristine, label)
        self.checked += 1


@dataclass
class Ran:
    """One timed call, kept until the next is prepared: its inputs as they are after it, the
    copy made before it, the fingerprint its set had when drawn, and its output."""

    given: list[Any]
    pristine: list[Any]
    drawn: tuple[int, ...]
    output: Any


class Feed:
    """One side's input sets and its zero-argument call for the timer (see the module doc)."""

    def __init__(
        self,
        model: Any,
        sets: list[list[Any]],
        checker: SpotChecker | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.model = model
        self.sets = sets
        self.checker = checker
        self.rng = rng or random.SystemRandom()
        self.drawn = [anticheat.fingerprint(s) for s in sets] if checker else []
        self.index = 0
        self.current = sets[0]
        self.pristine: list[Any] = []
        self.called = False
        self.output: Any = None

    def prepare(self) -> None:
        """Outside the timed region: judge the last call, then choose, change and copy the next
        call's inputs."""
        self.settle()
        self.index = self.rng.randrange(len(self.sets))
        self.current = self.sets[self.index]
        perturb(self.current, self.rng)
        self.pristine = copied(self.current)

    def __call__(self) -> object:
        self.output = self.model(*self.current)
        self.called = True
        return self.output

    def warm(self) -> None:
        """An untimed call on another input set than the next timed call's, its output dropped:
        a call timed by the host's clock then finds the host's caches as a loop of calls leaves
        them (harness.measure.timing.CudaTimer). Other inputs, so that the timed call cannot
        reuse this one's work; with a single set there is no warm call."""
        others = [s for i, s in enumerate(self.sets) if i != self.index]
        if others:
            self.model(*self.rng.choice(others))

    def settle(self) -> None:
        """Hand the last call, if any, to the spot checker (which may check it)."""
        output, self.output = self.output, None
        if self.called and self.checker is not None:
            drawn = self.drawn[self.index]
            self.checker.judge(Ran(self.current, self.pristine, drawn, output))
        self.called = False


def copied(values: list[Any]) -> list[Any]:
    """A copy of each input where it lies (tensors with their layout, harness.loading)."""
    return [
        replicate(v, v.device) if isinstance(v, torch.Tensor) else copy.deepcopy(v) for v in values
    ]


# The checks' criterion on one set of inputs: (pristine inputs) -> (expected, actual) -> mismatch
Criterion = Callable[[list[Any]], Callable[[Any, Any], "str | None"]]


def output_check(reference: Any, device: torch.device, criterion: Criterion) -> Check:
    """A Check comparing an output with the reference's on the same (pristine) inputs, by the
    criterion of the checks (harness.measure.checking.criterion)."""

    def check(output: Any, pristine: list[Any], label: str) -> None:
        expected = reference(*replicate_all(pristine, device))
        report = criterion(pristine)(expected, output)
        if report:
            raise Verdict(verdicts.INCORRECT, f"{label}: {report}{anticheat.poison_note(output)}")

    return check


UNSEEN_FACTOR = 3.0  # wall time per call above this many times the timed (or host) time ...
UNSEEN_SLACK_US = 50.0  # ... plus this is work the events did not see
# The wall-clock cross-check times this many short batches: on a busy machine long batches are
# preempted, so that honest calls read many times their timed figure and would be rejected;
# the least of many 1 ms batches is rarely preempted (docs/timing.md).
SEEN_BATCHES = 12
SEEN_BATCH_US = 1000.0  # ... each about this long (1 to 200 calls; 3 batches of longer calls)
SEEN_PAUSE_S = 1.0  # before the second try, where the first failed


def check_seen(feed: Feed, timed_us: float, host_us: float | None, device: Any) -> float:
    """Wall time per call over back-to-back calls, waiting for the device and every thread
    at the end of each batch; rejects work the timer could not see (see the module doc).

    The least of SEEN_BATCHES batch means is held to the timed figure: a busy machine slows
    some batches, while work the events missed slows every one. A try that fails is tried
    again after a pause, and the better try stands: a machine busy with compiles can slow every
    batch of one try. The second try is also held to the calls as the timer sees them then
    (`_timer_us`, between its batches): a machine busy through both tries slows those too,
    while work the timer does not see leaves them fast (docs/anticheat.md). Returns
    the median batch mean, what a loop of these calls typically costs per call, in
    microseconds.
    """
    seen_us = max(timed_us, host_us or 0.0, 1.0)
    count = min(200, max(1, math.ceil(SEEN_BATCH_US / seen_us)))
    # Calls longer than a batch are rarely preempted whole: three batches of one call do
    batches = min(SEEN_BATCHES, max(3, math.ceil(SEEN_BATCHES * SEEN_BATCH_US / seen_us)))
    limit_us = UNSEEN_FACTOR * seen_us + UNSEEN_SLACK_US
    threads = set(threading.enumerate())
    with torch.no_grad():
        feed.settle()  # these calls are not spot checked
        means = _batch_means(feed, device, threads, batches, count)
        if min(means) > limit_us:
            time.sleep(SEEN_PAUSE_S)
            timer: list[float] = []
            again = _batch_means(feed, device, threads, batches, count, timer)
            means = min(means, again, key=min)
            limit_us = max(limit_us, UNSEEN_FACTOR * min(timer) + UNSEEN_SLACK_US)
    if min(means) > limit_us:
        raise anticheat.reject(
            "unseen_work",
            f"each call takes {min(means):.1f} us of wall time once the device and its threads "
            f"are waited for (the least of {batches} batches of {count}, best of two tries), "
            f"against {timed_us:.1f} us timed: work the timer did not see (another stream, a "
            "thread); finish all work on the current stream",
        )
    return statistics.median(means)


def _batch_means(
    feed: Any,
    device: Any,
    threads: set[Any],
    batches: int,
    count: int,
    timer: list[float] | None = None,
) -> list[float]:
    """Each batch's wall time per call, the device and the threads waited for; with `timer`,
    each batch also times `count` calls as the timer does, appended there."""
    means = []
    for _ in range(batches):
        anticheat.wait_for_all(device, threads)
        if timer is not None:
            timer.append(_timer_us(feed, device, count))
            anticheat.wait_for_all(device, threads)
        begin = time.perf_counter()
        for _ in range(count):
            feed()
        anticheat.wait_for_all(device, threads)
        means.append((time.perf_counter() - begin) / count * 1e6)
    return means


def _timer_us(feed: Any, device: Any, count: int) -> float:
    """`count` calls per call as the timer sees them: CUDA events on the current stream on a
    GPU, the wall clock around the calls on a CPU; neither waits for another stream or a
    thread."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(count):
            feed()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1000.0 / count
    begin = time.perf_counter()
    for _ in range(count):
        feed()
    return (time.perf_counter() - begin) / count * 1e6
