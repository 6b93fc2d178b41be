"""One call of a solution on one benchmark, for Nsight Compute to count (run.py --ncu).

    python -m harness.measure.witness SPEC.json INDEX

harness.run.ncu has ncu launch this process with profiling off from the start; the one call
made between cudaProfilerStart and cudaProfilerStop is the one counted. SPEC.json is the
solution's worker Job (harness.codec's form). The solution loads
from the build cache its worker filled, and the benchmark's models and inputs come from the
seeds its timing used, so the call counted is one the timing made. One call before it, not
counted, pays for lazy initialisation (cuBLAS handles, first-use allocations).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from harness import codec
from harness.job import Job
from harness.loading import Seeds, import_file, make_inputs, reference_namespace
from harness.measure.checking import build_models
from harness.measure.worker import setup


def count_one_call(job: Job, index: int) -> None:
    """Make benchmark `index`'s call once untimed, then once between the profiler's marks."""
    settings = job.settings
    problem, device = setup(job)  # as the worker that timed it: TF32 off, the same build folder
    model_new = import_file(Path(job.solution), reference_namespace(job.reference)).ModelNew
    bench = problem.benchmarks[index]
    seed = Seeds.of(settings.checking).benchmark(index)
    _, model = build_models(problem, model_new, bench, seed, device)
    inputs = make_inputs(bench, seed, device)
    with torch.no_grad():
        model(*inputs)
        torch.cuda.synchronize(device)
        torch.cuda.profiler.start()
        model(*inputs)
        torch.cuda.synchronize(device)
        torch.cuda.profiler.stop()


if __name__ == "__main__":
    spec = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    count_one_call(codec.decode(Job, spec), int(sys.argv[2]))
