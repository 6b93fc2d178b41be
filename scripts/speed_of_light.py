"""Ceilings for the seed problems on this GPU: copy bandwidth, torch.compile, eager PyTorch.

A benchmark script, not a test: run it on the GPU machine and read the JSON it prints.

  copy bandwidth   `dst.copy_(src)` on 256 MiB and 1 GiB buffers, timed like the harness times
                   a solution (events, L2 flushed before each call, median); bytes read + written
  floors           the time each benchmark shape needs to read its inputs once at that bandwidth
  torch.compile    the smooth_l1 reference module compiled (compile time not timed), beside eager

  usage: python scripts/speed_of_light.py [--reps 200] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.inputs import seed_everything
from harness.loading import load_problem
from harness.timing import flush_buffer, time_cuda

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20


def copy_bandwidth(flush: torch.Tensor, reps: int) -> dict[str, float]:
    """GB/s (1e9 bytes per second, read + written) of a device-to-device copy, per size."""
    figures = {}
    for mib in (256, 1024):
        src = torch.empty(mib * MIB, dtype=torch.uint8, device="cuda").random_()
        dst = torch.empty_like(src)
        measured = time_cuda(partial(dst.copy_, src), warmup=5, reps=reps, flush=flush)
        figures[f"{mib} MiB"] = 2 * src.numel() / (measured.median_us * 1e-6) / 1e9
    return figures


def input_bytes(inputs: list[torch.Tensor], problem: str) -> int:
    """Bytes a kernel must read: every input once; for multilabel_margin, x plus the labels up
    to each row's first -1 (and that -1)."""
    if problem != "multilabel_margin":
        return sum(t.numel() * t.element_size() for t in inputs)
    x, y = inputs
    ends = (y == -1).int().argmax(dim=1) + 1
    return x.numel() * x.element_size() + int(ends.sum()) * y.element_size()


def time_model(model: torch.nn.Module, inputs: list[torch.Tensor], flush, reps: int) -> float:
    with torch.no_grad():
        return time_cuda(lambda: model(*inputs), warmup=10, reps=reps, flush=flush).median_us


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    flush = flush_buffer(torch.device("cuda"))
    bandwidth = copy_bandwidth(flush, args.reps)
    copy_gbs = max(bandwidth.values())
    report: dict = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    report["copy_GBps"] = bandwidth
    report["shapes"] = []
    for name in ("multilabel_margin", "smooth_l1"):
        problem = load_problem(name, ROOT / "problems" / name / "reference.py")
        for bench in problem.benchmarks:
            seed_everything(42)
            inputs = [t.cuda() for t in bench.get_inputs()]
            model = problem.model(*bench.get_init_inputs()).cuda().eval()
            nbytes = input_bytes(inputs, name)
            row = {
                "problem": name,
                "shape": bench.name,
                "min_bytes": nbytes,
                "floor_us": nbytes / (copy_gbs * 1e9) * 1e6,
                "eager_us": time_model(model, inputs, flush, args.reps),
            }
            if name == "smooth_l1":
                compiled = torch.compile(model)
                with torch.no_grad():
                    compiled(*inputs)  # compile outside the timing
                row["compile_us"] = time_model(compiled, inputs, flush, args.reps)
            report["shapes"].append(row)
            print(json.dumps(row), flush=True)
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
