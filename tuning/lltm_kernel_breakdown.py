"""Where the LLTM cell's time goes on the GPU, forward and backward, per kernel (issue 13):
matrix products against the rest, for eager, torch.compile and the CUDA solutions, and the
three products alone; the figures of problems/lltm/NOTES.md.

Run on: the lent NVIDIA H200, at commit ec72e3d, 2026-12-01 ~01:29 UTC. Recorded output:
tuning/results/lltm_kernel_breakdown.json and tuning/results/lltm_kernel_breakdown_h200.txt.
Its per-pass figures include host time (no sleep hides it), so at 1024x256x256 they are
host-bound; the harness's rows are the ones to quote there.

Runs on a GPU: python tuning/lltm_kernel_breakdown.py [OUT folder]. For eager PyTorch (the
reference), torch.compile of it, and each CUDA solution of solutions/lltm/, at the benchmark
shapes, it runs forward+backward under torch.profiler (L2 flushed by a 256 MiB max-reduction
before each pass, 10 passes after 3 warm ones) and sums the device time of the kernels by kind:
matrix products (cuBLAS/CUTLASS), the L2 flush (left out), everything else. It also times the
three matrix products alone (X W^T, dG W, dG^T X at float32, TF32 off) as the floor any solution
that keeps cuBLAS shares, and a 256 MiB device copy for the copy bandwidth. The gate math's
share of copy bandwidth: its fewest bytes (forward: read 3 gates + old_cell, write new_h and
new_cell; backward: read grad_h, grad_cell, 3 gates and old_cell, write 3 gate gradients and
d_old_cell: 16 floats per cell in all) over the solution's non-matmul kernel time.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from harness.loading import import_file  # noqa: E402

SHAPES = [(4096, 512, 1024), (1024, 256, 256)]
PASSES, WARM = 10, 3
GATE_FLOATS = 16  # per cell, forward and backward together (see the module doc)


def flush(buffer: torch.Tensor) -> None:
    buffer.amax()  # a max-reduction: no LLTM path runs one, so its kernel is told apart


def events_us(call, buffer: torch.Tensor, count: int = 30) -> float:
    times = []
    for _ in range(count):
        flush(buffer)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return sorted(times)[len(times) // 2]


def copy_gbps(buffer: torch.Tensor) -> float:
    dst = torch.empty_like(buffer)
    us = events_us(lambda: dst.copy_(buffer), torch.empty(1, device="cuda"))
    return 2 * buffer.numel() * buffer.element_size() / us / 1e3


def make(model_class, batch, features, state, reference):
    model = model_class(features, state).cuda()
    model.load_state_dict(reference.state_dict())
    return model


def step(model, inputs, ups):
    leaves = [t.detach().requires_grad_(True) for t in inputs]
    outputs = model(*leaves)
    torch.autograd.backward(list(outputs), ups)


def profile(model, inputs, ups, buffer) -> dict[str, Any]:
    for _ in range(WARM):
        step(model, inputs, ups)
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(PASSES):
            flush(buffer)
            step(model, inputs, ups)
        torch.cuda.synchronize()
    kinds: dict[str, Any] = {"matmul_us": 0.0, "other_us": 0.0}
    kernels: dict[str, float] = {}
    for event in prof.key_averages():
        us = event.device_time_total / PASSES  # total over the passes, per pass
        name = event.key
        if us <= 0 or name.startswith(("cudaLaunch", "cudaDevice")):
            continue
        lowered = name.lower()
        if "max" in lowered:  # the flush
            continue
        if "gemm" in lowered or "cutlass" in lowered or "sm90_xmma" in lowered:
            kinds["matmul_us"] += us
        else:
            kinds["other_us"] += us
        kernels[name[:90]] = round(us, 2)
    kinds["kernels"] = dict(sorted(kernels.items(), key=lambda kv: -kv[1])[:12])
    return kinds


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tuning" / "results"
    out.mkdir(parents=True, exist_ok=True)
    reference_module = import_file(ROOT / "problems" / "lltm" / "reference.py")
    solutions = {p.stem: p for p in sorted((ROOT / "solutions" / "lltm").glob("*cuda*.py"))}
    buffer = torch.empty(64 << 20, device="cuda")
    flush_only = {"flush_us": events_us(lambda: flush(buffer), torch.empty(1, device="cuda"))}
    results: dict[str, Any] = {"copy_gbps": copy_gbps(buffer), **flush_only, "shapes": {}}
    for batch, features, state in SHAPES:
        torch.manual_seed(0)
        reference = reference_module.Model(features, state).cuda()
        inputs = [t.cuda() for t in reference_module.cell_inputs(batch, features, state)]
        ups = [torch.randn(batch, state, device="cuda") for _ in range(2)]
        x = torch.randn(batch, features + state, device="cuda")
        w = reference.weights.detach()
        grad = torch.randn(batch, 3 * state, device="cuda")
        mm = {
            "forward X W^T": events_us(lambda x=x, w=w: x @ w.t(), buffer),
            "backward dG W": events_us(lambda grad=grad, w=w: grad @ w, buffer),
            "backward dG^T X": events_us(lambda grad=grad, x=x: grad.t() @ x, buffer),
        }
        models = {"eager": reference, "compile": torch.compile(reference)}
        for name, path in solutions.items():
            models[name] = make(import_file(path).ModelNew, batch, features, state, reference)
        shape: dict[str, Any] = {"matmuls_alone_us": mm, "floor_us": sum(mm.values())}
        for name, model in models.items():
            passes = events_us(lambda m=model, i=inputs, u=ups: step(m, i, u), buffer, 20)
            profiled = profile(model, inputs, ups, buffer)
            other = profiled["other_us"]
            gate_bytes = GATE_FLOATS * 4 * batch * state
            shape[name] = {
                "forward+backward_us": passes,
                **profiled,
                "non_matmul_us": other,
                "gate_share_of_copy": gate_bytes / max(other, 1e-3) / 1e3 / results["copy_gbps"],
            }
            print(
                f"{batch}x{features}x{state} {name:10s} fwd+bwd {passes:9.1f} us  matmul "
                f"{profiled['matmul_us']:8.1f}  other {other:8.1f}  gate share "
                f"{shape[name]['gate_share_of_copy']:.0%}",
                flush=True,
            )
        results["shapes"][f"{batch}x{features}x{state}"] = shape
        print(f"  matmuls alone: {mm} (sum {shape['floor_us']:.1f} us)", flush=True)
    (out / "lltm_kernel_breakdown.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
