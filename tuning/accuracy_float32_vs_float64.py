"""How far float32 PyTorch is from float64, and how many times that error honest and
approximate kernels need: the figures behind harness.accuracy's constants (issue 12, item 1).

Run on: the CPU, not the H200 (torch 2.14.1 with MKL, 2 threads), 2026-11-30; tuning/README.md
records no commit (the script and its output came in with commit 1e3ac9a). Recorded output:
tuning/results/accuracy_float32_vs_float64.json, and the printed table in
tuning/results/accuracy_float32_vs_float64.txt.

Measured: float32 PyTorch's own error against float64 for matrix-vector products, row sums and
dot products of 1e5..1e6 terms, GELU, LayerNorm and a matrix product.

For each computation: the reference in float32 (`ref`), the same in float64 (`wide`, taken as
exact), and variants: honest ones (other summation orders, wider accumulation) that must pass,
approximations that must fail. The reference's own error e_ref = |ref - wide| is one draw of
its rounding; `draws` more come from the reference run (float32 and float64) on copies of the
inputs moved by one unit in the last place at random. For each variant the multiple

    k = (|variant - wide| - floor) / scale,   floor = FLOOR_ULPS * eps * |wide|

is taken over the elements that today's rule (|variant - ref| <= 1e-4 + 1e-4 |ref|) rejects,
for these scales of the reference's error:

    elementwise   e_ref alone
    median        max(e_ref, median over the tensor of e_ref)
    draws         s = the largest of e_ref and the draws' errors, then max(s, median of s)

An honest variant passes when its largest k is below the multiple chosen, an approximation
fails when its largest k is above it; `failed_at` counts the runs each candidate multiple would
fail. Run: python tuning/accuracy_float32_vs_float64.py [--quick]; writes
tuning/results/accuracy_float32_vs_float64.json.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

FLOOR_ULPS = 2.0
DRAWS = int(next((a.split("=")[1] for a in sys.argv if a.startswith("--draws=")), 4))
MULTIPLES = (8, 16, 32, 64)
SCALES = ("elementwise", "median", "draws")

Fn = Callable[[list[torch.Tensor]], torch.Tensor]


def sequential(terms: torch.Tensor, lanes: int = 1) -> torch.Tensor:
    """Sum the last axis in float32 the way `lanes` threads would: each lane sums its strided
    share one term after another (numpy's cumsum is sequential, in the array's dtype), then the
    lanes are summed one after another."""
    rows = terms.reshape(-1, terms.shape[-1]).numpy()
    rows = np.pad(rows, ((0, 0), (0, -rows.shape[1] % lanes)))  # zeros: exact
    shares = rows.reshape(rows.shape[0], -1, lanes)  # term j goes to lane j % lanes
    partial = np.cumsum(shares, axis=1, dtype=np.float32)[:, -1, :]
    total = np.cumsum(partial, axis=1, dtype=np.float32)[:, -1]
    return torch.from_numpy(total.copy()).reshape(terms.shape[:-1])


def perturb(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """`x` with each normal finite element moved one ulp toward zero, or not, at random (as
    harness.accuracy.nudge does)."""
    bits = x.clone().view(torch.int32)
    coin = torch.randint(0, 2, x.shape, generator=g, dtype=torch.int32)
    movable = (x.abs() >= torch.finfo(x.dtype).tiny) & (x.abs() <= torch.finfo(x.dtype).max)
    return (bits - torch.where(movable, coin, 0)).view(x.dtype)


def quantile(x: torch.Tensor, q: float) -> float:
    return x.kthvalue(max(1, math.ceil(q * x.numel()))).values.item()


def scales(reference: Fn, inputs: list[torch.Tensor], g: torch.Generator) -> dict:
    ref = reference(inputs)
    wide = reference([x.double() for x in inputs])
    e_ref = (ref.double() - wide).abs().flatten()
    spread = e_ref.clone()
    for _ in range(DRAWS):
        moved = [perturb(x, g) for x in inputs]
        e = (reference(moved).double() - reference([x.double() for x in moved])).abs().flatten()
        spread = torch.maximum(spread, e)
    return {
        "ref": ref,
        "wide": wide,
        "elementwise": e_ref,
        "median": e_ref.clamp_min(quantile(e_ref, 0.5)),
        "draws": spread.clamp_min(quantile(spread, 0.5)),
    }


def judge(s: dict, got: torch.Tensor) -> dict:
    ref, wide = s["ref"], s["wide"]
    e_sol = (got.double() - wide).abs().flatten()
    floor = FLOOR_ULPS * torch.finfo(ref.dtype).eps * wide.abs().flatten()
    today_bad = ~torch.isclose(got, ref, rtol=1e-4, atol=1e-4).flatten()
    out = {
        "today_rejects": int(today_bad.sum()),
        "max_err": e_sol.max().item(),
        "ref_max_err": s["elementwise"].max().item(),
        "ref_median_err": quantile(s["elementwise"], 0.5),
    }
    for name in SCALES:
        k = (e_sol - floor).clamp_min(0) / s[name].clamp_min(1e-300)
        out[f"k_{name}"] = k[today_bad].max().item() if today_bad.any() else 0.0
    return out


def run(
    make: Callable[[torch.Generator], list[torch.Tensor]], reference: Fn, variants: dict, seeds: int
) -> dict:
    results: dict = {}
    for seed in range(seeds):
        g = torch.Generator().manual_seed(seed)
        inputs = make(g)
        s = scales(reference, inputs, g)
        for name, fn in variants.items():
            results.setdefault(name, []).append(judge(s, fn(inputs, g)))
    return summarize(results)


def summarize(results: dict) -> dict:
    out = {}
    for name, runs in results.items():
        row = {"runs": len(runs), "runs_today_rejects": sum(r["today_rejects"] > 0 for r in runs)}
        for key in runs[0]:
            if key != "today_rejects":
                row[key] = max(r[key] for r in runs)
        row["k_draws_least"] = min(r["k_draws"] for r in runs)  # an approximation's weakest run
        row["failed_at"] = {
            scale: {m: sum(r[f"k_{scale}"] > m for r in runs) for m in MULTIPLES}
            for scale in ("median", "draws")
        }
        out[name] = row
    return out


def matmul_ref(inputs: list[torch.Tensor]) -> torch.Tensor:
    return inputs[0] @ inputs[1]


def reduction_variants(exact_ok: bool = True) -> dict:
    """Honest ways to compute a @ x (a: M x K, x: K), and float16 inputs."""

    def perm(a, x, g):
        p = torch.randperm(a.shape[-1], generator=g)
        return a[..., p], x[p]

    def permuted_blas(inputs, g):
        a, x = perm(inputs[0], inputs[1], g)
        return a @ x

    def permuted_torch_sum(inputs, g):
        a, x = perm(inputs[0], inputs[1], g)
        return (a * x).sum(-1)

    def lanes(n):
        def f(inputs, g):
            a, x = perm(inputs[0], inputs[1], g)
            return sequential(a * x, n)

        return f

    return {
        "f64_accumulate": lambda i, g: (i[0].double() @ i[1].double()).float(),
        "permuted_blas": permuted_blas,
        "permuted_torch_sum": permuted_torch_sum,
        "lanes_256_sequential": lanes(256),
        "lanes_32_sequential": lanes(32),
        "fully_sequential": lanes(1),
        "fp16_inputs_f32_accumulate": lambda i, g: i[0].half().float() @ i[1].half().float(),
    }


def randn_pair(m: int, k: int) -> Callable[[torch.Generator], list[torch.Tensor]]:
    def make(g):
        a = torch.randn(m, k, generator=g)
        return [a.squeeze(0) if m == 1 else a, torch.randn(k, generator=g)]

    return make


def cancelling_pair(m: int, k: int) -> Callable[[torch.Generator], list[torch.Tensor]]:
    """a = [b, b], x = [v, -v]: every exact answer is 0, all that is left is rounding."""

    def make(g):
        b = torch.randn(m, k // 2, generator=g) * 10
        v = torch.randn(k // 2, generator=g)
        a = torch.cat([b, b], -1)
        return [a.squeeze(0) if m == 1 else a, torch.cat([v, -v])]

    return make


def row_sum_variants() -> dict:
    def perm(x, g):
        return x[..., torch.randperm(x.shape[-1], generator=g)]

    return {
        "f64_accumulate": lambda i, g: i[0].double().sum(-1).float(),
        "permuted_torch_sum": lambda i, g: perm(i[0], g).sum(-1),
        "lanes_256_sequential": lambda i, g: sequential(perm(i[0], g), 256),
        "lanes_32_sequential": lambda i, g: sequential(perm(i[0], g), 32),
        "fully_sequential": lambda i, g: sequential(perm(i[0], g), 1),
        "fp16_inputs": lambda i, g: i[0].half().float().sum(-1),
    }


def gelu() -> dict:
    make = lambda g: [torch.randn(1024, 4096, generator=g) * 3]  # noqa: E731
    variants = {
        "honest_erf_formula": lambda i, g: i[0] * 0.5 * (1.0 + torch.erf(i[0] / math.sqrt(2))),
        "honest_f64_rounded": lambda i, g: F.gelu(i[0].double()).float(),
        "tanh_approximation": lambda i, g: F.gelu(i[0], approximate="tanh"),
        "fp16_arithmetic": lambda i, g: F.gelu(i[0].half()).float(),
        "bf16_arithmetic": lambda i, g: F.gelu(i[0].bfloat16()).float(),
    }
    return run(make, lambda i: F.gelu(i[0]), variants, 1)


def layernorm() -> dict:
    n = 4096

    def make(g):
        return [
            torch.randn(512, n, generator=g) * 2 + 1,
            torch.randn(n, generator=g),
            torch.randn(n, generator=g),
        ]

    def ln(i, eps=1e-5):
        return F.layer_norm(i[0], (n,), i[1], i[2], eps=eps)

    def two_pass(i, g):
        x, w, b = i
        mean = x.mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-5) * w + b

    def one_pass(i, g):
        x, w, b = i
        mean = x.mean(-1, keepdim=True)
        var = (x * x).mean(-1, keepdim=True) - mean * mean
        return (x - mean) / torch.sqrt(var + 1e-5) * w + b

    variants = {
        "honest_two_pass": two_pass,
        "honest_one_pass_variance": one_pass,
        "off_by_1e-2": lambda i, g: ln(i) + 1e-2,
        "eps_1e-2": lambda i, g: ln(i, 1e-2),
        "fp16_arithmetic": lambda i, g: ln([t.half() for t in i]).float(),
    }
    return run(make, ln, variants, 1)


def matmul() -> dict:
    def make(g):
        return [torch.randn(512, 4096, generator=g), torch.randn(4096, 512, generator=g)]

    variants = {
        "f64_accumulate": lambda i, g: (i[0].double() @ i[1].double()).float(),
        "split_k_8": lambda i, g: sum(i[0][:, k::8] @ i[1][k::8] for k in range(8)),
        "fp16_inputs_f32_accumulate": lambda i, g: i[0].half().float() @ i[1].half().float(),
        "fp16_arithmetic": lambda i, g: (i[0].half() @ i[1].half()).float(),
    }
    return run(make, matmul_ref, variants, 1)


def main() -> None:
    quick = "--quick" in sys.argv
    n = (lambda full, short: short) if quick else (lambda full, short: full)
    torch.set_num_threads(2)
    rv = reduction_variants()
    sums = row_sum_variants()
    row_sum = lambda i: i[0].sum(-1)  # noqa: E731
    if "--only-cancelling" in sys.argv:
        for name, make, k in (
            ("matvec", cancelling_pair(64, 131072), 3),
            ("dot", cancelling_pair(1, 262_144), 100),
        ):
            for v, row in run(make, matmul_ref, rv, k).items():
                print(name, DRAWS, v, row["k_draws"], row["failed_at"]["draws"])
        return
    report = {
        "torch": torch.__version__,
        "floor_ulps": FLOOR_ULPS,
        "draws": DRAWS,
        "matvec_64x262144": run(randn_pair(64, 262144), matmul_ref, rv, n(5, 1)),
        "matvec_256x131072": run(randn_pair(256, 131072), matmul_ref, rv, n(3, 1)),
        "matvec_64x131072_cancelling": run(cancelling_pair(64, 131072), matmul_ref, rv, n(3, 1)),
        "row_sums_64x1000000": run(
            lambda g: [torch.randn(64, 1_000_000, generator=g)], row_sum, sums, n(3, 1)
        ),
        "row_sums_1024x100000": run(
            lambda g: [torch.randn(1024, 100_000, generator=g)], row_sum, sums, n(2, 1)
        ),
        "dot_100000": run(randn_pair(1, 100_000), matmul_ref, rv, n(200, 20)),
        "dot_262144": run(randn_pair(1, 262_144), matmul_ref, rv, n(100, 10)),
        "dot_1000000": run(randn_pair(1, 1_000_000), matmul_ref, rv, n(50, 5)),
        "dot_262144_cancelling": run(cancelling_pair(1, 262_144), matmul_ref, rv, n(100, 10)),
        "gelu_1024x4096": gelu(),
        "layernorm_512x4096": layernorm(),
        "matmul_512x4096x512": matmul(),
    }
    path = Path(__file__).parent / "results" / "accuracy_float32_vs_float64.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    for problem, variants in report.items():
        if not isinstance(variants, dict):
            continue
        print(problem)
        for name, row in variants.items():
            ks = " ".join(f"{s}={row['k_' + s]:.3g}" for s in SCALES)
            ks += f" (least draws={row['k_draws_least']:.3g})"
            print(
                f"  {name:27s} today rejects {row['runs_today_rejects']}/{row['runs']}; "
                f"err {row['max_err']:.2g} (ref {row['ref_max_err']:.2g}); k: {ks}; "
                f"failed at {row['failed_at']}"
            )


if __name__ == "__main__":
    main()
