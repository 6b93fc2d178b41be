"""The wall-clock cross-check after the timing: the solution's calls back to back, waiting for
the whole device and every thread after each batch. A solution whose work the timer did not see
(launched on another stream, left to a thread) is rejected as "unseen_work"
(harness.measure.benchmarking runs it on each row).
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from typing import Any

import torch

from harness.measure import anticheat, feeding

UNSEEN_FACTOR = 3.0  # wall time per call above this many times the timed (or host) time ...
UNSEEN_SLACK_US = 50.0  # ... plus this is work the events did not see
# The wall-clock cross-check times this many short batches: on a busy machine long batches are
# preempted, so that honest calls read many times their timed figure and would be rejected;
# the least of many 1 ms batches is rarely preempted (docs/timing.md).
SEEN_BATCHES = 12
SEEN_BATCH_US = 1000.0  # ... each about this long (1 to 200 calls; 3 batches of longer calls)
SEEN_PAUSE_S = 1.0  # before the second try, where the first failed


def check_seen(feed: feeding.Feed, timed_us: float, host_us: float | None, device: Any) -> float:
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
