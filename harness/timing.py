"""Time a zero-argument call, on a GPU with CUDA events or on a CPU with a wall clock.

The rule, on a GPU (`time_cuda`):
  1. `warmup` untimed calls, then a synchronisation;
  2. for each of `reps` timed calls: write a buffer of twice the device's L2 size (which evicts
     the inputs and outputs of the previous call from L2, so no call starts with a warm cache),
     then record a start event, make the call, record an end event;
  3. one synchronisation at the end, then read each event pair.
The flush sits outside the events. It also keeps the GPU busy while the host enqueues the call,
so the events see the kernel's device time and not the host's launch latency.

On a CPU (`time_wall`): `warmup` untimed calls, then `reps` calls each between two reads of a
wall clock (perf_counter by default; tests inject their own). No cache is flushed.

Both return a Measurement holding every raw sample; statistics are derived from them.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

Clock = Callable[[], float]  # seconds


@dataclass(frozen=True)
class Measurement:
    """Raw timings of repeated calls, in microseconds, with derived statistics."""

    times_us: tuple[float, ...]
    method: str  # "cuda_events" or "wall_clock"

    @property
    def count(self) -> int:
        return len(self.times_us)

    @property
    def median_us(self) -> float:
        return statistics.median(self.times_us)

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

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "count": self.count,
            "median_us": self.median_us,
            "iqr_us": self.iqr_us,
            "min_us": min(self.times_us),
            "times_us": list(self.times_us),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        return cls(tuple(data["times_us"]), data["method"])


def time_wall(
    fn: Callable[[], object], *, warmup: int, reps: int, clock: Clock = time.perf_counter
) -> Measurement:
    """Time `reps` calls of `fn` with a wall clock after `warmup` untimed calls."""
    _check_counts(warmup, reps)
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(reps):
        start = clock()
        fn()
        samples.append((clock() - start) * 1e6)
    return Measurement(tuple(samples), "wall_clock")


def flush_buffer(device: torch.device) -> torch.Tensor:
    """A byte buffer twice the size of the device's L2 cache; writing it evicts L2."""
    l2_bytes = torch.cuda.get_device_properties(device).L2_cache_size
    return torch.empty(2 * max(l2_bytes, 1 << 20), dtype=torch.uint8, device=device)


def time_cuda(
    fn: Callable[[], object], *, warmup: int, reps: int, flush: torch.Tensor
) -> Measurement:
    """Time `reps` calls of `fn` with CUDA events, flushing L2 before each (see module doc)."""
    _check_counts(warmup, reps)
    for _ in range(warmup):
        flush.zero_()
        fn()
    torch.cuda.synchronize(flush.device)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for start, end in zip(starts, ends, strict=True):
        flush.zero_()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize(flush.device)
    samples = tuple(start.elapsed_time(end) * 1e3 for start, end in zip(starts, ends, strict=True))
    return Measurement(samples, "cuda_events")


def _check_counts(warmup: int, reps: int) -> None:
    if warmup < 0 or reps < 1:
        raise ValueError(f"need warmup >= 0 and reps >= 1, got warmup={warmup} reps={reps}")
