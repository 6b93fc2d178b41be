"""Time zero-argument calls side by side until the samples are precise enough.

The stopping rule is `harness.settings.StopRule`, whose docstring writes it down (run.py's `-h`
prints it): warm up, then sample in rounds whose order turns each round, in doubling batches,
until each call's relative standard error is small enough, the budget is spent, or the cap.
Because each round holds one sample of every call taken at nearly the same moment, the samples
are paired: clock, temperature and neighbour drift hit both, and stats.paired_ratio turns them
into a speedup with an interval.

Timers (each times a list of calls once each, in order, in microseconds; a call with a
`prepare` method has it called first, outside the timed region, to set up its inputs; one
with a `warm` method has that called, untimed, before it is timed by the host's clock):
  - CudaTimer: before each call, outside the events, read a buffer twice the L2 size (which
    evicts every line of the previous call and leaves L2 holding clean lines only; `FLUSHES`
    says why not write it, as triton's do_bench does), then keep
    the GPU busy with a sleep kernel long enough to cover the call's host time, so the events
    see the call's device time and not the host's launch latency; one synchronisation per
    batch. With `flush=None` (CUDA-graph mode, where rotated inputs defeat the cache) only the
    sleep is issued.
  - WallTimer: a wall clock around each call (CPU work), no cache flush.
Tests inject a fake timer and clock: the rule is plain Python over the timer's samples.

"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from harness import settings, stats
from harness.record import Measurement
from harness.settings import StopRule

Call = Callable[[], object]
Clock = Callable[[], float]  # seconds


class Timer(Protocol):
    method: str

    def run(self, calls: Sequence[Call]) -> list[float]:
        """Time each call once, in order; microseconds."""
        ...


@dataclass
class Sampled:
    """What `sample` returns: one Measurement per call name, why it stopped, and when."""

    measurements: dict[str, Measurement]
    stop: str  # "target", "budget" or "cap"
    batches: list[int] = field(default_factory=list)  # rounds in each batch, in order


def sample(
    calls: dict[str, Call],
    timer: Timer,
    rule: StopRule,
    clock: Clock = time.perf_counter,
    after_batch: Callable[[int], None] | None = None,
) -> Sampled:
    """Time `calls` side by side, round by round, under `rule` (see the module doc). A timer
    that keeps what it learnt of each call (CudaTimer) forgets it first: these calls are new."""
    reset = getattr(timer, "reset", None)
    if reset is not None:
        reset()
    names = list(calls)
    start = clock()
    while True:  # warm-up: whole rounds, at least one
        timer.run(_rounds(calls, names, 0, 1))
        if clock() - start >= rule.warmup_ms / 1e3:
            break
    samples: dict[str, list[float]] = {name: [] for name in names}
    batches: list[int] = []
    start, done = clock(), 0
    while True:
        size = min(max(rule.min_samples, done), rule.max_samples - done)
        times = timer.run(_rounds(calls, names, done, size))
        for index, value in enumerate(times):
            round_, slot = divmod(index, len(names))
            samples[_turned(names, done + round_)[slot]].append(value)
        done += size
        batches.append(size)
        if after_batch is not None:
            after_batch(size)
        stop = _stop_reason(samples, rule, done, clock() - start)
        if stop:
            host = getattr(timer, "host_us", {})
            waits = getattr(timer, "synchronizing", {})
            measured = {
                name: Measurement(tuple(values), timer.method, host.get(name), waits.get(name))
                for name, values in samples.items()
            }
            return Sampled(measured, stop, batches)


def _turned(names: list[str], round_: int) -> list[str]:
    shift = round_ % len(names)
    return names[shift:] + names[:shift]


def _rounds(calls: dict[str, Call], names: list[str], first: int, count: int) -> list[Call]:
    order = [name for r in range(first, first + count) for name in _turned(names, r)]
    return [_Named(name, calls[name]) for name in order]


@dataclass(frozen=True)
class _Named:
    """A call that carries its name, so a timer can keep per-call state (host time)."""

    name: str
    fn: Call

    def __call__(self) -> object:
        return self.fn()

    def prepare(self) -> None:
        prepare_call(self.fn)

    def warm(self) -> None:
        warm_call(self.fn)


def prepare_call(call: Call) -> None:
    prepare = getattr(call, "prepare", None)
    if prepare is not None:
        prepare()


def warm_call(call: Call) -> None:
    """An untimed call just before a call timed by the host's clock: the call's `warm` (the
    same code on other inputs, see harness.measure.feeding.Feed.warm), else the call itself."""
    warm = getattr(call, "warm", None)
    (warm or call)()


def _stop_reason(
    samples: dict[str, list[float]], rule: StopRule, done: int, elapsed_s: float
) -> str | None:
    if done < rule.min_samples:
        return None
    if all(stats.relative_standard_error(v) <= rule.target_rse for v in samples.values()):
        return "target"
    if done >= rule.max_samples:
        return "cap"
    if elapsed_s >= rule.budget_ms / 1e3:
        return "budget"
    return None


class WallTimer:
    """A wall clock around each call (CPU work); no cache flush."""

    method = "wall_clock"

    def __init__(self, clock: Clock = time.perf_counter) -> None:
        self.clock = clock

    def run(self, calls: Sequence[Call]) -> list[float]:
        times = []
        for call in calls:
            prepare_call(call)
            begin = self.clock()
            call()
            times.append((self.clock() - begin) * 1e6)
        return times


# How CudaTimer empties L2 before each call. "read" (the default) reads a buffer twice the L2
# size, so the call starts with L2 full of clean lines of that buffer. "write" zeroes it, as
# triton's do_bench does: the call then starts with L2 full of dirty lines, and pays for writing
# them back as it evicts them (docs/timing.md measures what that costs). None: no
# flush (CUDA-graph mode, where rotated input sets keep the cache cold).
FLUSHES = (*settings.FLUSHES, None)  # None: no flush (CUDA-graph replays)


class L2Flush:
    """Evicts the previous call's lines from L2 when called (see FLUSHES)."""

    def __init__(self, device: torch.device, kind: str | None = "read") -> None:
        if kind not in FLUSHES:
            raise ValueError(f"flush must be one of {', '.join(map(str, FLUSHES))}, not {kind!r}")
        self.kind = kind
        self.buffer = flush_buffer(device) if kind else None
        self.sink = torch.empty((), dtype=torch.float32, device=device)

    def __call__(self) -> None:
        if self.buffer is None:
            return
        if self.kind == "write":
            self.buffer.zero_()
        else:
            torch.sum(self.buffer, dim=0, out=self.sink)


class CudaTimer:
    """CUDA events around each call, with an L2 flush and a host-hiding sleep before it.

    A call that waits for the device (cudaDeviceSynchronize, .item(), .cpu(), a blocking copy)
    would wait for the sleep too, so its host time, and with it the next sleep, would grow
    round after round. Each call is probed once, before its first timed run (`probe`); a call
    that waits is timed by the host's clock instead, from the return of the call before it to
    its own (`_waited`): its kernels plus its synchronisation, what a loop of such calls costs. In a
    loop, each call finds the host as the one before left it; amid the harness's own work (new
    inputs, the other side's call) the same call takes longer. So WARM_CALLS untimed calls
    (`warm_call`, on other inputs) come just before it, after the flush: back to back, as in a
    loop, with its own inputs still cold (docs/timing.md: why four, measured).
    """

    HOST_MARGIN = 1.5  # the sleep covers this many times the call's median host time ...
    HOST_EXTRA_US = 10.0  # ... plus this
    PROBE_SLEEPS_US = (1000.0, 4000.0)  # the two sleeps a call is probed behind
    WARM_CALLS = 4  # untimed calls just before a call that waits for the device (class doc)

    def __init__(
        self, device: torch.device, flush: str | None = "read", method: str = "cuda_events"
    ):
        self.device = device
        self.method = method
        self.flush = L2Flush(device, flush)
        self.cycles_per_us = sleep_cycles_per_us(device)
        self.host_us: dict[str, float] = {}
        self.synchronizing: dict[str, bool] = {}  # by call name, once probed
        # The sleep before each call, when the parent fixes it for both sides of a directed
        # sampling (harness.measure.directed); else it follows each call's own host time.
        self.fixed_cover_us: float | None = None

    def reset(self) -> None:
        """Forget which calls wait for the device: the next calls are probed afresh."""
        self.synchronizing.clear()

    def run(self, calls: Sequence[Call]) -> list[float]:
        for call in calls:
            name = getattr(call, "name", "")
            if name not in self.synchronizing:
                self.synchronizing[name] = self.probe(call)
        timed: list[tuple[Any, Any] | float] = []  # events, or a waiting call's own time
        host: list[tuple[str, float]] = []
        for call in calls:
            name = getattr(call, "name", "")
            prepare_call(call)
            self.flush()
            if self.synchronizing[name]:
                torch.cuda.synchronize(self.device)  # the flush done before the warm calls
                waited = self._waited(call)
                timed.append(waited)
                host.append((name, waited))
                continue
            cover = self.fixed_cover_us or self.cover_us(self.host_us.get(name, 50.0))
            torch.cuda._sleep(int(cover * self.cycles_per_us))
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            begin = time.perf_counter()
            call()
            host.append((name, (time.perf_counter() - begin) * 1e6))
            end.record()
            timed.append((start, end))
        torch.cuda.synchronize(self.device)
        for name in {n for n, _ in host}:
            self.host_us[name] = statistics.median(t for n, t in host if n == name)
        return [t if isinstance(t, float) else t[0].elapsed_time(t[1]) * 1e3 for t in timed]

    @classmethod
    def cover_us(cls, host_us: float) -> float:
        """The sleep that hides a call of median host time `host_us` behind it."""
        return cls.HOST_MARGIN * host_us + cls.HOST_EXTRA_US

    def _waited(self, call: Call) -> float:
        """A call that waits for the device, timed as a loop of such calls costs: WARM_CALLS
        untimed calls, then the host's clock from the return of the last one to the return of
        this one, in microseconds. Work a call leaves on the stream after its wait is waited for
        by the next one (stream order), so each window holds what the call before left, as each
        turn of a loop does.

        Nothing comes between the last warm call and this one: a call that follows a
        synchronize or a stream query of the harness's own (to be sure the device was idle)
        costs more than in a loop, while one that follows calls of its own costs what it does
        in a loop (docs/timing.md)."""
        for _ in range(self.WARM_CALLS):
            warm_call(call)
        begin = time.perf_counter()
        call()
        return (time.perf_counter() - begin) * 1e6

    def probe(self, call: Call) -> bool:
        """Whether `call` waits for the device: its host time behind each of two sleeps, after
        one call on an idle device (a first call's one-time costs would blur the difference)."""
        prepare_call(call)
        call()
        behind = []
        for sleep_us in self.PROBE_SLEEPS_US:
            prepare_call(call)
            torch.cuda.synchronize(self.device)
            torch.cuda._sleep(int(sleep_us * self.cycles_per_us))
            begin = time.perf_counter()
            call()
            behind.append((time.perf_counter() - begin) * 1e6)
            torch.cuda.synchronize(self.device)
        return waits_for_device(self.PROBE_SLEEPS_US, behind)


def waits_for_device(sleeps_us: tuple[float, float], host_us: list[float]) -> bool:
    """True when a call's host time grew with the sleep queued before it by more than half the
    difference: it waited for the device. A call that only enqueues work returns at once,
    whatever the device is still doing."""
    return host_us[1] - host_us[0] > 0.5 * (sleeps_us[1] - sleeps_us[0])


def flush_buffer(device: torch.device) -> torch.Tensor:
    """A float32 buffer of twice the device's L2 size; reading it evicts every line of L2."""
    l2_bytes = torch.cuda.get_device_properties(device).L2_cache_size
    return torch.zeros(2 * max(l2_bytes, 1 << 20) // 4, dtype=torch.float32, device=device)


def sleep_cycles_per_us(device: torch.device) -> float:
    """GPU clock cycles per microsecond, measured by timing torch.cuda._sleep."""
    cycles = 2_000_000
    torch.cuda._sleep(cycles)  # the first launch pays for loading the kernel
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    torch.cuda.synchronize(device)
    return cycles / (start.elapsed_time(end) * 1e3)


def floor_us(timer: Timer, device: torch.device, rule: StopRule) -> float:
    """The median time the timer gives a call that launches one kernel on one element: the
    least any kernel can measure under this method."""
    tiny = torch.zeros(1, device=device)
    sampled = sample({"floor": lambda: tiny.add_(1)}, timer, _quick(rule))
    return sampled.measurements["floor"].median_us


def _quick(rule: StopRule) -> StopRule:
    return StopRule(
        warmup_ms=min(rule.warmup_ms, 20.0),
        min_samples=rule.min_samples,
        max_samples=max(rule.min_samples, 200),
        target_rse=rule.target_rse,
        budget_ms=min(rule.budget_ms, 200.0),
    )
