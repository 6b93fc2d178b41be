"""The stopping rule and the intervals, with an injected timer and clock (seeded noise); the
CUDA timer on a GPU only."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import replace

import pytest
import torch

from harness import codec, stats
from harness.measure.timing import (
    CudaTimer,
    Measurement,
    WallTimer,
    floor_us,
    sample,
    waits_for_device,
)
from harness.settings import StopRule


class FakeTimer:
    """Each named call lasts a seeded random time around its own mean; time passes only as
    calls are 'timed'. An optional drift multiplies every call of a round alike, as a clock
    change on a real GPU would."""

    method = "fake"

    def __init__(self, means_us: dict[str, float], cv: float, seed: int, drift: float = 0.0):
        self.means_us, self.cv = means_us, cv
        self.rng = random.Random(seed)
        self.drift = drift
        self.now = 0.0  # seconds
        self.order: list[str] = []
        self.calls = 0

    def run(self, calls: Sequence) -> list[float]:
        times = []
        for call in calls:
            call()
            self.calls += 1
            self.order.append(call.name)
            round_factor = 1 + self.drift * math.sin(self.calls / 50)
            value = self.means_us[call.name] * round_factor * self.rng.lognormvariate(0, self.cv)
            self.now += value / 1e6
            times.append(value)
        return times

    def clock(self) -> float:
        return self.now


def run(means: dict[str, float], rule: StopRule, cv: float, seed: int = 0, drift: float = 0.0):
    timer = FakeTimer(means, cv, seed, drift)
    calls = {name: (lambda: None) for name in means}
    return sample(calls, timer, rule, timer.clock), timer


RULE = StopRule(warmup_ms=0, min_samples=10, max_samples=5000, target_rse=0.005, budget_ms=1e9)


def test_quiet_calls_stop_at_the_target_after_the_minimum() -> None:
    sampled, _ = run({"a": 100.0, "b": 50.0}, RULE, cv=0.005)
    assert sampled.stop == "target"
    assert [m.count for m in sampled.measurements.values()] == [10, 10]


def test_noisier_calls_take_more_samples_until_the_target_holds() -> None:
    sampled, _ = run({"a": 100.0, "b": 50.0}, RULE, cv=0.1)
    assert sampled.stop == "target"
    for measured in sampled.measurements.values():
        assert measured.rse <= RULE.target_rse
        assert measured.count >= (0.1 / RULE.target_rse) ** 2 * 0.7  # n ~ (cv / target)^2
    assert sampled.batches[:3] == [10, 10, 20]  # batches double


def test_the_cap_stops_a_call_that_never_settles() -> None:
    rule = StopRule(warmup_ms=0, min_samples=10, max_samples=50, target_rse=1e-4, budget_ms=1e9)
    sampled, _ = run({"a": 10.0}, rule, cv=0.5)
    assert sampled.stop == "cap"
    assert sampled.measurements["a"].count == 50


def test_the_budget_stops_sampling_but_never_below_the_minimum() -> None:
    rule = StopRule(warmup_ms=0, min_samples=10, max_samples=5000, target_rse=1e-4, budget_ms=5)
    sampled, _ = run({"a": 1000.0}, rule, cv=0.5)  # 1 ms a call: 10 calls pass the budget
    assert sampled.stop == "budget"
    assert sampled.measurements["a"].count == 10
    quick = StopRule(warmup_ms=0, min_samples=10, max_samples=5000, target_rse=1e-4, budget_ms=50)
    sampled, _ = run({"a": 1000.0}, quick, cv=0.5)
    assert sampled.stop == "budget" and 10 < sampled.measurements["a"].count <= 80


def test_warmup_runs_whole_rounds_for_its_time_and_none_are_kept() -> None:
    rule = StopRule(warmup_ms=2.1, min_samples=10, max_samples=10, target_rse=0.5, budget_ms=1e9)
    sampled, timer = run({"a": 100.0, "b": 100.0}, rule, cv=0.0)
    assert timer.calls == 2 * 11 + 2 * 10  # 11 warm-up rounds of 2 x 100 us pass 2.1 ms
    assert sampled.measurements["a"].count == 10


def test_rounds_alternate_which_call_goes_first() -> None:
    rule = StopRule(warmup_ms=0, min_samples=4, max_samples=4, target_rse=0.5, budget_ms=1e9)
    _, timer = run({"a": 1.0, "b": 1.0}, rule, cv=0.0)
    assert timer.order[2:] == [
        "a",
        "b",
        "b",
        "a",
        "a",
        "b",
        "b",
        "a",
    ]  # after one warm-up round a b


def test_paired_interval_covers_the_true_speedup_and_beats_drift() -> None:
    covered, paired_widths, unpaired_widths = 0, [], []
    for seed in range(100):
        sampled, _ = run({"ref": 200.0, "sol": 100.0}, RULE, cv=0.05, seed=seed, drift=0.2)
        ref, sol = (sampled.measurements[n].times_us for n in ("ref", "sol"))
        paired = stats.paired_ratio(ref, sol)
        covered += paired.low <= 2.0 <= paired.high
        paired_widths.append(paired.high - paired.low)
        unpaired = stats.unpaired_ratio(ref, sol)
        unpaired_widths.append(unpaired.high - unpaired.low)
    assert covered >= 88  # a 95% interval: 95 of 100 expected
    assert sum(paired_widths) < 0.5 * sum(unpaired_widths)  # pairing cancels the drift


def test_a_blocked_interval_covers_a_speedup_that_shifts_from_block_to_block() -> None:
    # On a CPU a side's speed drifts between the segments of rounds it runs in (the machine's
    # state, not its own noise): rounds of one block share a shift that pairing does not
    # cancel, so the per-round interval is too narrow and the blocked one is not.
    rng = random.Random(11)
    paired_hits = blocked_hits = 0
    for _ in range(100):
        ref, sol = [], []
        for _block in range(12):
            shift = rng.lognormvariate(0, 0.15)  # this block's solution runs slower or faster
            for _round in range(4):
                ref.append(200.0 * rng.lognormvariate(0, 0.01))
                sol.append(100.0 * shift * rng.lognormvariate(0, 0.01))
        paired_hits += stats.paired_ratio(ref, sol).low <= 2.0 <= stats.paired_ratio(ref, sol).high
        blocked = stats.blocked_ratio(ref, sol, 4)
        blocked_hits += blocked.low <= 2.0 <= blocked.high
        assert blocked.value == stats.paired_ratio(ref, sol).value
    assert blocked_hits >= 88 and paired_hits < 70


def test_a_cpu_rows_interval_widens_by_the_share_other_processes_took() -> None:
    from harness.measure import directed
    from harness.run import rounds
    from harness.run.rounds import Sampling

    ref = Measurement(tuple(200.0 + i % 3 for i in range(40)), "wall_clock")
    sol = Measurement(tuple(100.0 + i % 2 for i in range(40)), "wall_clock")
    spec = directed.Spec("b", "forward", "wall_clock", (), 1, "cpu")
    quiet = Sampling(spec, ref, sol, others_share=0.01).speedup()
    busy = Sampling(spec, ref, sol, others_share=0.5).speedup()
    assert busy.value == quiet.value
    blocked = stats.blocked_ratio(ref.times_us, sol.times_us, rounds.CHUNK_ROUNDS)
    assert busy.low == pytest.approx(blocked.low / 2) and busy.high == pytest.approx(
        blocked.high * 2
    )
    # quiet, the samples' own interval is narrower than what runs of it differ by
    spread = 1 + rounds.CPU_RUN_SPREAD
    assert quiet.low == pytest.approx(quiet.value / spread)
    assert quiet.high == pytest.approx(quiet.value * spread)
    gpu = Sampling(replace(spec, device="cuda:0", timer="cuda_events"), ref, sol, others_share=0.5)
    assert gpu.speedup() == stats.paired_ratio(ref.times_us, sol.times_us)


def test_median_interval_has_its_stated_coverage() -> None:
    rng = random.Random(7)
    true_median = math.exp(0.0)  # lognormal(0, 0.3)
    hits = 0
    for _ in range(400):
        values = [rng.lognormvariate(0, 0.3) for _ in range(60)]
        interval = stats.median_interval(values)
        hits += interval.low <= true_median <= interval.high
    assert 0.91 <= hits / 400 <= 0.99


def test_unpaired_ratio_divides_medians_and_brackets_them() -> None:
    ratio = stats.unpaired_ratio([4.0, 4.1, 3.9] * 10, [2.0, 2.1, 1.9] * 10)
    assert ratio.value == pytest.approx(2.0)
    assert ratio.low < 2.0 < ratio.high


def test_relative_standard_error_and_geomean() -> None:
    assert stats.relative_standard_error([1.0]) == math.inf
    assert stats.relative_standard_error([2.0, 2.0, 2.0]) == 0.0
    assert stats.relative_standard_error([1.0, 3.0]) == pytest.approx(
        0.5
    )  # std sqrt(2) / sqrt(2) / 2
    assert stats.geomean([1.0, 4.0]) == pytest.approx(2.0)
    assert math.isnan(stats.geomean([]))


@pytest.mark.parametrize(
    "fields",
    [
        {"min_samples": 0},
        {"min_samples": 20, "max_samples": 10},
        {"target_rse": 0},
        {"budget_ms": 0},
        {"warmup_ms": -1},
    ],
)
def test_bad_rules_are_refused(fields: dict) -> None:
    with pytest.raises(ValueError):
        StopRule(**fields)


def test_wall_timer_times_each_call_with_its_clock() -> None:
    ticks = iter([0.0, 0.001, 0.5, 0.502])
    timer = WallTimer(clock=lambda: next(ticks))
    assert timer.run([lambda: None, lambda: None]) == pytest.approx([1000.0, 2000.0])


def test_statistics_follow_from_the_samples() -> None:
    m = Measurement((1.0, 2.0, 3.0, 4.0, 100.0), "wall_clock")
    assert m.median_us == 3.0
    assert m.iqr_us == pytest.approx(2.0)  # quartiles 2 and 4
    assert m.spread == pytest.approx(2.0 / 3.0)
    assert Measurement((5.0,), "wall_clock").iqr_us == 0.0


def test_measurement_round_trips_through_a_record() -> None:
    m = Measurement((3.0, 1.0, 2.0), "cuda_events", host_us=4.0)
    data = codec.encode(m)
    assert data["median_us"] == 2.0 and data["count"] == 3 and data["min_us"] == 1.0
    assert data["median_low_us"] <= 2.0 <= data["median_high_us"]
    assert codec.decode(Measurement, data) == m


def test_measurement_says_whether_the_call_waits_for_the_device() -> None:
    waits = Measurement((3.0, 1.0, 2.0), "cuda_events", host_us=4.0, synchronizes=True)
    assert codec.encode(waits)["synchronizes"] is True
    assert codec.decode(Measurement, codec.encode(waits)) == waits
    assert "synchronizes" not in codec.encode(Measurement((1.0,), "wall_clock"))  # unknown: unsaid


@pytest.mark.parametrize(
    ("host_us", "waits"),
    [
        ([12.0, 14.0], False),  # returns at once behind either sleep: it only enqueues work
        ([3000.0, 3100.0], False),  # slow on the host, but not because of the device
        ([1010.0, 4012.0], True),  # waits out each sleep: it synchronizes
        ([620.0, 2190.0], True),  # waits for most of each (the sleep had begun before)
    ],
)
def test_a_call_waits_for_the_device_when_its_host_time_follows_the_sleep(
    host_us: list[float], waits: bool
) -> None:
    assert waits_for_device((1000.0, 4000.0), host_us) is waits


def test_sampling_starts_from_a_timer_that_has_forgotten_earlier_calls() -> None:
    class Forgetful(FakeTimer):
        resets = 0

        def reset(self) -> None:
            self.resets += 1

    timer = Forgetful({"a": 5.0}, cv=0.0, seed=0)
    sample({"a": lambda: None}, timer, RULE, timer.clock)
    sample({"a": lambda: None}, timer, RULE, timer.clock)
    assert timer.resets == 2


@pytest.mark.alone
@pytest.mark.gpu
def test_cuda_timer_probes_whether_a_call_waits_for_the_device() -> None:
    device = torch.device("cuda")
    timer = CudaTimer(device)
    x = torch.randn(1 << 16, device=device)
    rule = StopRule(warmup_ms=5, min_samples=20, max_samples=100, budget_ms=500)
    calls = {"enqueues": lambda: x.mul(2), "waits": lambda: x.mul(2).sum().item()}
    sampled = sample(calls, timer, rule)
    assert sampled.measurements["enqueues"].synchronizes is False
    assert sampled.measurements["waits"].synchronizes is True
    # Timed without the host-hiding sleep, a waiting call costs microseconds, not the sleep.
    assert sampled.measurements["waits"].median_us < 1000


@pytest.mark.alone
@pytest.mark.gpu
def test_work_that_a_waiting_call_leaves_on_the_stream_is_timed_too() -> None:
    device = torch.device("cuda")
    timer = CudaTimer(device)
    x = torch.randn(1 << 16, device=device)
    two_ms = int(2000 * timer.cycles_per_us)

    def waits_then_leaves_work() -> None:
        x.sum().item()
        torch.cuda._sleep(two_ms)  # enqueued after the wait, still running when it returns

    rule = StopRule(warmup_ms=5, min_samples=10, max_samples=20, budget_ms=500)
    sampled = sample({"leaves": waits_then_leaves_work}, timer, rule)
    assert sampled.measurements["leaves"].synchronizes is True
    assert sampled.measurements["leaves"].median_us > 1800


@pytest.mark.alone
@pytest.mark.gpu
def test_cuda_timer_sees_device_time_above_the_floor() -> None:
    device = torch.device("cuda")
    timer = CudaTimer(device)
    assert timer.flush.buffer is not None
    assert (
        timer.flush.buffer.numel() * 4 >= 2 * torch.cuda.get_device_properties(device).L2_cache_size
    )
    x = torch.randn(1 << 24, device=device)
    rule = StopRule(warmup_ms=5, min_samples=20, max_samples=200, budget_ms=500)
    sampled = sample({"small": lambda: x.mul(2), "large": lambda: x.repeat(8).mul(2)}, timer, rule)
    small, large = sampled.measurements["small"], sampled.measurements["large"]
    floor = floor_us(timer, device, rule)
    assert 0 < floor < small.median_us < large.median_us
    assert small.host_us is not None and small.host_us > 0
    dirty = sample({"small": lambda: x.mul(2)}, CudaTimer(device, flush="write"), rule)
    assert dirty.measurements["small"].median_us > 0.5 * small.median_us
