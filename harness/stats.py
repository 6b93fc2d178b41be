"""Statistics of timing samples: noise, intervals and geometric means, all distribution-free.

Timing samples are skewed (a floor, then a tail of slow outliers), so intervals here use order
statistics rather than a normal model:

- a median's interval is the pair of order statistics that a binomial(n, 1/2) count puts
  around it (the classic sign-test interval, normal approximation to the binomial);
- a paired speedup is the median of the per-round ratios reference / solution, with that
  median's interval: the two calls of a round run back to back, so drift cancels in the ratio;
- an unpaired ratio (a cached baseline, or two recorded runs) divides the two medians, and its
  interval combines each median's interval at sqrt(confidence), so that both hold together
  with at least `confidence` when the two sample sets are independent;
- a ratio of two estimates that carry only their intervals (two runs' speedups) divides the
  bounds crosswise, so that the intervals' half-widths add on a log scale.

The raw timings of one call and the statistics derived from them (harness.record keeps them
in each benchmark row).

Where a worker's seconds go inside its phases: named parts of judging a solution (inputs
drawn, models built, the reference's and the solution's calls, the harness's guards, the
comparisons, the float64 answer, gradients, timing, per-call timing, spot checks, the profile),
each timed on the host's clock. The worker sends them back with its result (`parts_s`), the
record keeps them, and a run's last lines sum them over its solutions.

Parts nest, and each second counts once: while an inner part runs, the outer one is paused
(the float64 answer computed inside a comparison counts as `float64`, not as `compare`). The
device's work counts in the part that waits for it (a comparison's result is read on the host).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from harness.codec import omitted_when

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Interval:
    """A point estimate with its confidence interval."""

    value: float
    low: float
    high: float


def relative_standard_error(samples: Sequence[float]) -> float:
    """Standard error of the mean over the mean; inf with fewer than two samples."""
    if len(samples) < 2:
        return math.inf
    values = np.asarray(samples, dtype=np.float64)
    mean = float(values.mean())
    if mean <= 0:
        return math.inf
    return float(values.std(ddof=1)) / math.sqrt(len(values)) / mean


def median_interval(samples: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """The median and a distribution-free interval for it (sign-test order statistics)."""
    if not samples:
        raise ValueError("no samples")
    values = np.sort(np.asarray(samples, dtype=np.float64))
    n = len(values)
    median = float(np.median(values))
    half = _z(confidence) * math.sqrt(n) / 2
    low = max(0, math.floor(n / 2 - half))
    high = min(n - 1, math.ceil(n / 2 + half) - 1)
    return Interval(median, float(values[low]), float(values[high]))


def paired_ratio(
    numerator: Sequence[float], denominator: Sequence[float], confidence: float = CONFIDENCE
) -> Interval:
    """Median of numerator[i] / denominator[i] over paired samples, with its interval."""
    if len(numerator) != len(denominator):
        raise ValueError(f"unpaired: {len(numerator)} and {len(denominator)} samples")
    ratios = np.asarray(numerator, dtype=np.float64) / np.asarray(denominator, dtype=np.float64)
    return median_interval(ratios.tolist(), confidence)


def blocked_ratio(
    numerator: Sequence[float],
    denominator: Sequence[float],
    block: int,
    confidence: float = CONFIDENCE,
) -> Interval:
    """paired_ratio's median, with an interval that still holds where consecutive rounds
    share their conditions (a CPU's load, frequency and caches drift over tens of
    milliseconds, so neighbouring rounds are not independent): the hull of the per-round
    interval and the interval of the ratios of each `block` consecutive rounds' medians."""
    paired = paired_ratio(numerator, denominator, confidence)
    tops, bottoms = list(numerator), list(denominator)
    starts = range(0, len(tops), max(block, 1))
    ratios = [
        statistics.median(tops[i : i + block]) / statistics.median(bottoms[i : i + block])
        for i in starts
    ]
    if len(ratios) < 2:
        return paired
    blocks = median_interval(ratios, confidence)
    return Interval(paired.value, min(paired.low, blocks.low), max(paired.high, blocks.high))


def unpaired_ratio(
    numerator: Sequence[float], denominator: Sequence[float], confidence: float = CONFIDENCE
) -> Interval:
    """median(numerator) / median(denominator), with a conservative joint interval."""
    each = math.sqrt(confidence)
    top, bottom = median_interval(numerator, each), median_interval(denominator, each)
    return Interval(top.value / bottom.value, top.low / bottom.high, top.high / bottom.low)


def mean_interval(samples: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """The mean and its normal-approximation interval (mean +- z * standard error)."""
    if not samples:
        raise ValueError("no samples")
    values = np.asarray(samples, dtype=np.float64)
    mean = float(values.mean())
    half = (
        _z(confidence) * float(values.std(ddof=1)) / math.sqrt(len(values))
        if len(values) > 1
        else 0.0
    )
    return Interval(mean, mean - half, mean + half)


def mean_ratio(
    numerator: Sequence[float], denominator: Sequence[float], confidence: float = CONFIDENCE
) -> Interval:
    """mean(numerator) / mean(denominator), as KernelBench reports a speedup, with the
    conservative joint interval of `quotient`."""
    each = math.sqrt(confidence)
    top, bottom = mean_interval(numerator, each), mean_interval(denominator, each)
    return quotient(top, bottom)


def quotient(numerator: Interval, denominator: Interval) -> Interval:
    """numerator / denominator of two estimates from independent runs, each with its interval.

    The bounds divide crosswise (low over high, high over low): on a log scale the two
    intervals' half-widths add, each side on its own. That is conservative: without a model,
    both intervals hold together with at least confidence squared (0.95: 90%), and then so does
    this one; where each estimate's error is normal on a log scale, adding the half-widths
    rather than combining them in quadrature covers more than `confidence`.
    """
    return Interval(
        numerator.value / denominator.value,
        numerator.low / denominator.high,
        numerator.high / denominator.low,
    )


def geomean(values: Sequence[float]) -> float:
    """Geometric mean of positive values; nan when there are none."""
    if not values:
        return math.nan
    return math.exp(sum(math.log(v) for v in values) / len(values))


def sol_sides_us(
    moved: int, flops: int | None, copy_gbps: float | None, peak_tflops: float | None
) -> tuple[float | None, float | None]:
    """The speed of light's two sides in microseconds: `moved` bytes at the copy bandwidth and
    `flops` at the peak; each None where its count or rate is missing. T_SOL is the larger."""
    memory = moved / (copy_gbps * 1e3) if copy_gbps else None
    compute = flops / (peak_tflops * 1e6) if flops and peak_tflops else None
    return memory, compute


def sol_score(time_us: float, baseline_us: float, sol_us: float) -> float | None:
    """SOL-ExecBench's score of a time against the speed of light: 1 / (1 + (T - T_SOL) /
    (T_baseline - T_SOL)), 0 as T grows without end, 0.5 at the baseline's time, 1 at the bound
    (above 1: faster than the bound). None where the baseline is not slower than the bound."""
    if baseline_us <= sol_us:
        return None
    return 1 / (1 + (time_us - sol_us) / (baseline_us - sol_us))


def _z(confidence: float) -> float:
    """The standard normal quantile for a two-sided interval of `confidence`."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence}")
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + confidence / 2)


@dataclass(frozen=True)
class Measurement:
    """Raw timings of one call, in microseconds, with statistics derived from them."""

    times_us: tuple[float, ...]
    method: str  # "cuda_events", "cuda_graph" or "wall_clock"
    host_us: float | None = None  # median host time to enqueue the call (GPU timers)
    # the call waits for the device (CUDA timers; None: unknown, and not written)
    synchronizes: bool | None = field(default=None, metadata=omitted_when(None))
    # written beside the samples for people reading the JSON; never read back
    DERIVED: ClassVar[tuple[str, ...]] = (
        "count",
        "median_us",
        "median_low_us",
        "median_high_us",
        "iqr_us",
        "min_us",
        "rse",
    )

    @property
    def count(self) -> int:
        return len(self.times_us)

    @property
    def median_us(self) -> float:
        return statistics.median(self.times_us)

    @property
    def mean_us(self) -> float:
        return statistics.fmean(self.times_us)

    @property
    def interval(self) -> Interval:
        """The median with its 95% distribution-free interval (stats.median_interval)."""
        return median_interval(self.times_us)

    @property
    def iqr_us(self) -> float:
        """Interquartile range: the spread of the middle half of the samples."""
        if self.count < 2:
            return 0.0
        q1, _, q3 = statistics.quantiles(self.times_us, n=4, method="inclusive")
        return q3 - q1

    @property
    def spread(self) -> float:
        """IQR as a fraction of the median (0.02 means the middle half spans 2% of it)."""
        return self.iqr_us / self.median_us if self.median_us > 0 else 0.0

    @property
    def rse(self) -> float:
        return relative_standard_error(self.times_us)

    @property
    def median_low_us(self) -> float:
        return self.interval.low

    @property
    def median_high_us(self) -> float:
        return self.interval.high

    @property
    def min_us(self) -> float:
        return min(self.times_us)


@dataclass(frozen=True)
class PerCall:
    """Both sides timed call by call from an idle device, host time included
    (harness.measure.benchmarking.PerCallTimer), and the speedup that gives."""

    reference: Measurement
    solution: Measurement
    speedup: Interval


class Parts:
    """Seconds by part name, each counted once (the module doc)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._open: list[tuple[str, float]] = []  # the parts running, innermost last, each
        # with the moment its current stretch began

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        now = time.perf_counter()
        if self._open:  # pause the part this one runs inside
            outer, began = self._open[-1]
            self._add(outer, now - began)
        self._open.append((name, now))
        try:
            yield
        finally:
            now = time.perf_counter()
            _, began = self._open.pop()
            self._add(name, now - began)
            if self._open:  # resume the outer part
                self._open[-1] = (self._open[-1][0], now)

    def inside(self, name: str) -> bool:
        """Whether a part of that name is open now (at any depth)."""
        return any(open_name == name for open_name, _ in self._open)

    def _add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def taken(self) -> dict[str, float]:
        """The seconds so far, rounded to the millisecond; the count starts again."""
        taken = {name: round(s, 3) for name, s in self.seconds.items()}
        self.seconds = {}
        return taken


PARTS = Parts()  # the process's: a worker judges one solution at a time


def part(name: str) -> AbstractContextManager[None]:
    """`with part("compare"):` counts the block's seconds as `name` in the process's PARTS."""
    return PARTS.part(name)
