"""Run a solution on every correctness case of its problem, without the reference.

Meant to run under compute-sanitizer, which checks every memory access of the solution's
kernels (an out-of-bounds read on invalid input, a shared-memory race):

  compute-sanitizer --tool memcheck \
      python scripts/run_cases.py smooth_l1 solutions/smooth_l1/fast_cuda.py

Builds go to the harness's build cache, so solutions built by run.py are not rebuilt. Each
case's outcome is printed; the exit status is 0 unless a case raised for valid input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.loading import import_file, load_problem, make_init_inputs, make_inputs
from harness.toolchain import arch_list, use_build_cache

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problem", help="a problem name under problems/")
    parser.add_argument("solution", type=Path, help="the solution file")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    device = torch.device("cuda", 0)
    arch = arch_list(torch.cuda.get_device_capability(device), None)
    solution = args.solution.resolve()
    use_build_cache(ROOT / ".cache" / "builds", args.problem, solution, arch)
    problem = load_problem(args.problem, ROOT / "problems" / args.problem / "reference.py")
    model_new = import_file(solution).ModelNew
    failures = 0
    for case in problem.cases:
        model = model_new(*make_init_inputs(case, device)).to(device)
        inputs = make_inputs(case, args.seed, device)
        try:
            with torch.no_grad():
                out = model(*inputs)
            torch.cuda.synchronize()
            finite = bool(torch.isfinite(out).all()) if isinstance(out, torch.Tensor) else "?"
            print(f"{case.name}: ran, all finite: {finite}")
        except Exception as err:  # an error is the right answer to invalid input only
            print(f"{case.name}: raised {type(err).__name__}: {str(err).splitlines()[0]}")
            failures += not case.invalid
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
