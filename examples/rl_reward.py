"""Turn the harness's verdicts into RL rewards: one batch of sampled kernels, one reward each.

    python examples/rl_reward.py smooth_l1 my_kernel_a.py my_kernel_b.py

What each verdict scores (`reward`):

- `rejected` (the solution broke an anti-cheat rule: it read the answer, skipped work, timed
  itself...): -1.0, below any honest failure, so that cheating never pays.
- `compile_error`, `load_error`, `runtime_error`, `crashed`, `timeout`, `incorrect`: 0.0.
- `ok`: 0.3 for being correct, plus up to 1.0 for speed: log2 of the speedup over eager PyTorch
  that the harness is 95% sure of (the geometric mean of each shape's interval's lower end),
  counted from 1x to 16x. A correct kernel slower than eager gets 0.3; noise cannot lift a
  reward, since only the lower ends count.
- `problem_error`, `no_gpu`: None, no reward: the sample was not at fault; leave it out of the
  batch's update.

The batch is judged as one sweep (builds in parallel, on every GPU that --gpus names), and every
verdict is recorded under results/ as run.py records it.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the harness, from anywhere

from harness import verdicts
from harness.run.evaluator import Evaluation, Evaluator

CORRECT = 0.3  # what a correct kernel earns, however slow
SPEEDUP_CAP = 16.0  # speedups past this earn no more (log2: 4 steps of 0.25)
CHEATED = -1.0
NOT_THE_SAMPLES_FAULT = {verdicts.PROBLEM_ERROR, verdicts.NO_GPU}


def reward(result: Evaluation) -> float | None:
    """The reward of one verdict (the module doc), None where the sample was not at fault."""
    if result.status in NOT_THE_SAMPLES_FAULT:
        return None
    if result.status == verdicts.REJECTED:
        return CHEATED
    if not result.ok:
        return 0.0
    lows = [max(interval.low, 1e-9) for interval in result.speedups]
    if not lows:  # checked, not timed (check_only)
        return CORRECT
    sure = math.exp(sum(math.log(low) for low in lows) / len(lows))
    return CORRECT + math.log2(min(max(sure, 1.0), SPEEDUP_CAP)) / math.log2(SPEEDUP_CAP)


def main(problem: str, samples: list[str]) -> None:
    results = Evaluator(quiet=False).evaluate_many([(problem, sample) for sample in samples])
    for sample, result in zip(samples, results, strict=True):
        print(f"{sample}: {result.status} -> reward {reward(result)}  ({result.detail[:80]})")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
