"""The raw timings of one call and the statistics derived from them (harness.record keeps them
in each benchmark row)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import ClassVar

from harness import stats
from harness.codec import omitted_when
from harness.stats import Interval


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
        return stats.median_interval(self.times_us)

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
        return stats.relative_standard_error(self.times_us)

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
    (harness.measure.percall.PerCallTimer), and the speedup that gives."""

    reference: Measurement
    solution: Measurement
    speedup: Interval
