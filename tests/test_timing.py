"""Timing rule and statistics, with an injected clock; the CUDA path on a GPU only."""

import itertools
import random

import pytest
import torch

from harness.timing import Measurement, flush_buffer, time_cuda, time_wall


class FakeClock:
    """Advances only when called for a timed call: each call lasts a seeded random duration."""

    def __init__(self, seed: int, base_s: float = 1e-3, noise_s: float = 1e-4) -> None:
        self.rng = random.Random(seed)
        self.now = 0.0
        self.durations: list[float] = []
        self.base_s, self.noise_s = base_s, noise_s
        self.reads = itertools.count()

    def __call__(self) -> float:
        if next(self.reads) % 2:  # the end of a call: it took a random time
            duration = self.base_s + self.rng.uniform(-self.noise_s, self.noise_s)
            self.durations.append(duration)
            self.now += duration
        return self.now


def test_wall_clock_timing_makes_warmup_and_timed_calls() -> None:
    calls = []
    clock = FakeClock(seed=1)
    measurement = time_wall(lambda: calls.append(1), warmup=3, reps=20, clock=clock)
    assert len(calls) == 23
    assert measurement.count == 20 and measurement.method == "wall_clock"
    assert measurement.times_us == pytest.approx([d * 1e6 for d in clock.durations])
    assert 900 <= measurement.median_us <= 1100


def test_statistics_follow_from_the_samples() -> None:
    m = Measurement((1.0, 2.0, 3.0, 4.0, 100.0), "wall_clock")
    assert m.median_us == 3.0
    assert m.iqr_us == pytest.approx(2.0)  # quartiles 2 and 4
    assert m.spread == pytest.approx(2.0 / 3.0)
    assert Measurement((5.0,), "wall_clock").iqr_us == 0.0


def test_measurement_round_trips_through_a_record() -> None:
    m = Measurement((3.0, 1.0, 2.0), "cuda_events")
    data = m.to_dict()
    assert data["median_us"] == 2.0 and data["count"] == 3 and data["min_us"] == 1.0
    assert Measurement.from_dict(data) == m


def test_seeded_noise_gives_a_stable_median() -> None:
    medians = [
        time_wall(lambda: None, warmup=0, reps=101, clock=FakeClock(seed=s)).median_us
        for s in range(5)
    ]
    assert max(medians) - min(medians) < 50  # noise is +-100 us around 1000 us


@pytest.mark.parametrize(("warmup", "reps"), [(-1, 5), (0, 0)])
def test_bad_counts_are_refused(warmup: int, reps: int) -> None:
    with pytest.raises(ValueError):
        time_wall(lambda: None, warmup=warmup, reps=reps)


@pytest.mark.gpu
def test_cuda_timing_flushes_twice_l2_and_measures_device_time() -> None:
    device = torch.device("cuda")
    flush = flush_buffer(device)
    assert flush.numel() >= 2 * torch.cuda.get_device_properties(device).L2_cache_size
    x = torch.randn(1 << 24, device=device)
    small = time_cuda(lambda: x.mul(2), warmup=3, reps=30, flush=flush)
    large = time_cuda(lambda: x.repeat(8).mul(2), warmup=3, reps=30, flush=flush)
    assert small.method == "cuda_events" and small.count == 30
    assert 0 < small.median_us < large.median_us
