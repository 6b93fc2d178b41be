"""What a call that waits for the device (cudaDeviceSynchronize, .item(), .cpu(), a blocking
copy) costs per call in a back-to-back loop, against the ways one call can be timed alone, on a
toy CUDA solution that synchronizes four ways (TOY_SYNC); the figures behind CudaTimer's
handling of such calls (issue 12, item 2).

Run on: the lent NVIDIA H200, at commit 2bf89e0 plus this script, 2026-11-30 ~22:10 UTC; and
at 0e255ad with `_waited` no longer querying the stream before the call (one warm call),
2026-12-02 ~10:55 UTC. Recorded output of both: tuning/results/sync_timing_toy_h200.txt.

Runs on a GPU: python tuning/sync_timing_toy.py [--samples N]. For each TOY_SYNC mode of
tests/fixtures/toy_solutions/cuda_synchronizes.py, on the toy problem's benchmark (256x256), it
prints the median microseconds per call of:

    loop        back-to-back calls, the wall clock over a batch (min and median of batch means)
    idle        flush, synchronize, host clock around the call and a final synchronize
    idle_bare   flush, synchronize, host clock around the call alone
    idle_cold   no flush: synchronize, host clock around the call and a final synchronize
    pair        flush, synchronize, one call, then the host clock around a second call
    pair_flush  one call, flush, synchronize, then the host clock around a second call
    each        back-to-back calls, the host clock around each
    timer       harness.measure.timing.CudaTimer, one call per run (with a warm call on
                other inputs, as the harness's feeds give it)
    sampled     harness.measure.timing.sample with the reference (x * 2 + 1) beside it, as a
                benchmark row is sampled (the solution's median)
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness.measure.timing import Call, CudaTimer, sample
from harness.settings import StopRule

SOLUTION = Path(__file__).resolve().parents[1] / "tests/fixtures/toy_solutions/cuda_synchronizes.py"
SAMPLES = int(sys.argv[sys.argv.index("--samples") + 1]) if "--samples" in sys.argv else 200


def load(mode: str):
    os.environ["TOY_SYNC"] = mode
    spec = importlib.util.spec_from_file_location(f"sync_{mode}", SOLUTION)
    assert spec is not None and spec.loader is not None, SOLUTION
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ModelNew(2.0).cuda()


def median_us(take, samples: int = SAMPLES) -> float:
    return statistics.median(take() for _ in range(samples))


class Warmed:
    """A call with a warm call on other inputs (harness.measure.feeding.Feed.warm)."""

    name = "solution"

    def __init__(self, model, x, other) -> None:
        self.model, self.x, self.other = model, x, other

    def __call__(self):
        return self.model(self.x)

    def warm(self) -> None:
        self.model(self.other)


def variants(call, timer: CudaTimer, warmed: Warmed) -> dict[str, float]:
    sync = torch.cuda.synchronize
    clock = time.perf_counter

    def timed(before, after=None):
        def take():
            before()
            begin = clock()
            call()
            if after:
                after()
            return (clock() - begin) * 1e6

        return take

    def flush_sync():
        timer.flush()
        sync()

    def flush_sync_call():
        flush_sync()
        call()

    def call_flush_sync():
        call()
        flush_sync()

    def batches(count=50, rounds=9):
        means = []
        for _ in range(rounds):
            sync()
            begin = clock()
            for _ in range(count):
                call()
            sync()
            means.append((clock() - begin) / count * 1e6)
        return min(means), statistics.median(means)

    def each():
        times = []
        sync()
        for _ in range(SAMPLES):
            begin = clock()
            call()
            times.append((clock() - begin) * 1e6)
        return statistics.median(times)

    loop_min, loop_median = batches()
    figures = {"loop_min": loop_min, "loop_median": loop_median}
    figures["idle"] = median_us(timed(flush_sync, sync))
    figures["idle_bare"] = median_us(timed(flush_sync))
    figures["idle_cold"] = median_us(timed(sync, sync))
    figures["pair"] = median_us(timed(flush_sync_call))
    figures["pair_flush"] = median_us(timed(call_flush_sync))
    figures["each"] = each()
    figures["timer"] = statistics.median(timer.run([warmed])[0] for _ in range(SAMPLES))
    figures["timer_sync"] = float(timer.synchronizing["solution"])
    x = warmed.x
    calls: dict[str, Call] = {"reference": lambda: x * 2 + 1, "solution": warmed}
    rule = StopRule(
        warmup_ms=20, min_samples=SAMPLES, max_samples=SAMPLES, target_rse=1e-9, budget_ms=1e4
    )
    figures["sampled"] = sample(calls, timer, rule).measurements["solution"].median_us
    return figures


def main() -> None:
    device = torch.device("cuda")
    timer = CudaTimer(device)
    x = torch.randn(256, 256, device=device)
    print(torch.cuda.get_device_name(), torch.__version__)
    rows = []
    for mode in ("device", "item", "cpu", "copy"):
        model = load(mode)
        with torch.no_grad():
            for _ in range(20):
                model(x)
            timer.reset()
            warmed = Warmed(model, x, torch.randn_like(x))
            rows.append((mode, variants(lambda m=model: m(x), timer, warmed)))
    names = list(rows[0][1])
    print("mode    " + " ".join(f"{n:>11}" for n in names))
    for mode, figures in rows:
        print(f"{mode:<8}" + " ".join(f"{figures[n]:11.1f}" for n in names))


if __name__ == "__main__":
    main()
