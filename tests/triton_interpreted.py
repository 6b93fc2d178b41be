"""Check a Triton solution with the harness's own checks on the CPU, its kernels run by Triton's
interpreter (TRITON_INTERPRET=1, set before Triton is imported): how tests/test_triton.py holds
the shipped Triton solutions right on every case where no GPU is there.

    python -m tests.triton_interpreted <problem or reference .py> <solution .py> [fp16|bf16|fp32]

Prints the number of checks made and exits 0, or prints the failing verdict and exits 1."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"

import torch

from harness.loading import import_file, load_problem
from harness.measure.checking import check_cases
from harness.settings import REPO, Checking
from harness.verdicts import Verdict


def main(problem_name: str, solution: str, precision: str | None = None) -> int:
    named = REPO / "problems" / problem_name / "reference.py"
    reference = Path(problem_name) if problem_name.endswith(".py") else named
    problem = load_problem(reference.parent.name, reference, precision)
    model_new = import_file(solution).ModelNew
    try:
        checks = check_cases(problem, model_new, torch.device("cpu"), Checking(trials=1))
    except Verdict as verdict:
        print(f"{verdict.status}: {verdict.detail}")
        return 1
    print(f"checks: {checks}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
