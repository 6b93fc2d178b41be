"""The raw timings of one call and the statistics derived from them (harness.record keeps them
in each benchmark row)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness import stats
from harness.stats import Interval

Data = Mapping[str, Any]


@dataclass(frozen=True)
class Measurement:
    """Raw timings of one call, in microseconds, with statistics derived from them."""

    times_us: tuple[float, ...]
    method: str  # "cuda_events", "cuda_graph" or "wall_clock"
    host_us: float | None = None  # median host time to enqueue the call (GPU timers)
    synchronizes: bool | None = None  # the call waits for the device (CUDA timers; None: unknown)

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

    def to_dict(self) -> dict[str, Any]:
        interval = self.interval
        return {
            "method": self.method,
            "count": self.count,
            "median_us": self.median_us,
            "median_low_us": interval.low,
            "median_high_us": interval.high,
            "iqr_us": self.iqr_us,
            "min_us": min(self.times_us),
            "rse": self.rse,
            "host_us": self.host_us,
            "times_us": list(self.times_us),
            **({"synchronizes": self.synchronizes} if self.synchronizes is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: Data) -> Measurement:
        return cls(
            tuple(data["times_us"]), data["method"], data.get("host_us"), data.get("synchronizes")
        )


@dataclass(frozen=True)
class PerCall:
    """Both sides timed call by call from an idle device, host time included
    (harness.measure.percall.PerCallTimer), and the speedup that gives."""

    reference: Measurement
    solution: Measurement
    speedup: Interval

    def to_dict(self) -> dict[str, Any]:
        return {
            "reference": self.reference.to_dict(),
            "solution": self.solution.to_dict(),
            "speedup": self.speedup.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Data) -> PerCall:
        return cls(
            Measurement.from_dict(data["reference"]),
            Measurement.from_dict(data["solution"]),
            Interval(**data["speedup"]),
        )
