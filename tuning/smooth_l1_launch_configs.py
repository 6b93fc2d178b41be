"""smooth_l1's launch configurations: wide_cuda's 16 configurations x 6 grid sizes against
fast_cuda, seed_cuda, F.smooth_l1_loss and the seed module, at 32x64x56x56 and 128x64x56x56
(issue 13).

Run on: the lent NVIDIA H200, at commit ec72e3d, 2026-12-01 ~01:31 UTC, 30 rounds. Recorded
output: tuning/results/smooth_l1_launch_configs.json and
tuning/results/smooth_l1_launch_configs_h200.txt.

Builds, in parallel (one load_inline each, distinct names, under .cache/tuning13/smooth_l1):
fast_cuda and seed_cuda as shipped, and wide_cuda's CUDA source (fast_cuda's kernel with its
launch shape and load kind as template parameters) in GROUPS extensions, each with a
`variant(input, target, beta, reduction, config, blocks_per_sm)` entry point appended that
launches CONFIGS[config] = (threads per block, float4 loads per input per thread, load kind,
layout, tail) with a grid of `blocks_per_sm` (0 as many as fit, k > 0 at most k per SM, -1 one
pass); wide_cuda's docstring says what each value means. "wide (as shipped)" is wide_cuda with
its macros' defaults.

Checks every (config, grid) against the reference module run in float64 (|got - exact| <= 1e-4 +
1e-4 |exact|, NaN where it is NaN) on the problem's cases (reductions, beta 0 / 0.5 / 2, odd
sizes, 0-D, misaligned and non-contiguous views, size 0) and on 32x64x56x56 (mean, sum, none);
then times each with 'mean', beta 1, at 32x64x56x56 (every grid) and 128x64x56x56 (grids 0 and
-1) as the harness does (harness.measure.timing.CudaTimer: CUDA events around one call, L2
flushed by reading a 2x L2 buffer and host time hidden behind a sleep before each call),
SAMPLES rounds (default 50) with every variant and the baselines once per round in a turning
order. Baselines: the seed module (the reference Model, eager: the 8x target is against it),
F.smooth_l1_loss, fast_cuda, seed_cuda. Speedup: the median over rounds of seed module /
variant; the target is 8x.

Run on the GPU: OUT=dir python3 tuning/smooth_l1_launch_configs.py; writes
OUT/smooth_l1_launch_configs.json (OUT defaults to tuning/results) and prints a table at the end.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import math
import os
import statistics
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from harness.loading import replicate  # noqa: E402
from harness.measure.timing import CudaTimer  # noqa: E402
from harness.toolchain import prepare_environment  # noqa: E402

OUT = Path(os.environ.get("OUT") or ROOT / "tuning" / "results")
SAMPLES = int(os.environ.get("SAMPLES", "50"))
DEVICE = torch.device("cuda")  # a dry run of the plumbing may set another
BUILD_DIR = ROOT / ".cache" / "tuning13" / "smooth_l1"
SOLUTIONS = ROOT / "solutions" / "smooth_l1"
# (threads, unroll, load, layout, tail): load 0 cs, 1 nc, 2 nc.L1::no_allocate.L2::256B,
# 3 nc.L1::no_allocate, 4 cs.L2::256B; layout 0 grid-stride, 1 block spans; tail 0 fence +
# atomicAdd, 1 atom.acq_rel. Config 0 is fast_cuda's kernel; 2 is wide_cuda's default.
CONFIGS = [
    (256, 4, 0, 0, 0),
    (256, 4, 0, 0, 1),
    (512, 4, 0, 0, 1),
    (1024, 4, 0, 0, 1),
    (256, 8, 0, 0, 1),
    (512, 8, 0, 0, 1),
    (1024, 2, 0, 0, 1),
    (256, 4, 1, 0, 1),
    (256, 4, 2, 0, 1),
    (256, 4, 3, 0, 1),
    (256, 4, 4, 0, 1),
    (512, 4, 2, 0, 1),
    (256, 4, 0, 1, 1),
    (512, 4, 0, 1, 1),
    (1024, 4, 2, 1, 1),
    (512, 8, 2, 0, 1),
]
GROUPS = 4  # extensions the configs are spread over, built in parallel
GRIDS = (0, 1, 2, 4, 8, -1)  # blocks_per_sm
BIG_GRIDS = (0, -1)  # at 128x64x56x56
REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}
results: dict = {"samples": SAMPLES, "configs": CONFIGS, "grids": GRIDS}


def save() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "smooth_l1_launch_configs.json").write_text(json.dumps(results, indent=1, default=str))


def sources(path: Path) -> tuple[str, str]:
    """CPP_SOURCE and CUDA_SOURCE of a solution file, read without importing (building) it."""
    found = {}
    for node in ast.parse(path.read_text()).body:
        if not isinstance(node, ast.Assign):
            continue
        target = node.targets[0]
        if isinstance(target, ast.Name) and target.id in ("CPP_SOURCE", "CUDA_SOURCE"):
            found[target.id] = ast.literal_eval(node.value)
    return found["CPP_SOURCE"], found["CUDA_SOURCE"]


def group_configs(group: int) -> list[int]:
    return [i for i in range(len(CONFIGS)) if i % GROUPS == group]


def variant_source(group: int) -> str:
    cases = "\n".join(
        f"    case {i}: return launch<{t}, {u}, {ld}, {lay}, {tail}>(a, b, beta, r, bps);"
        for i, (t, u, ld, lay, tail) in ((i, CONFIGS[i]) for i in group_configs(group))
    )
    return f"""
torch::Tensor variant(torch::Tensor a, torch::Tensor b, double beta, int64_t r, int64_t config,
                      int64_t bps) {{
  switch (config) {{
{cases}
    default: break;
  }}
  TORCH_CHECK(false, "config ", config, " is not in this extension");
  return torch::Tensor();
}}
"""


DECL = (
    "\ntorch::Tensor variant(torch::Tensor a, torch::Tensor b, double beta, int64_t r,"
    " int64_t config, int64_t bps);"
)


def build_all() -> tuple[dict, dict]:
    """(name -> callable(a, b, beta, code) for each (config, grid), baselines by name)."""
    from torch.utils.cpp_extension import load_inline

    wide_cpp, wide_cuda = sources(SOLUTIONS / "wide_cuda.py")
    jobs = {}
    for name in ("fast_cuda", "seed_cuda"):
        cpp, cuda = sources(SOLUTIONS / f"{name}.py")
        jobs[name] = dict(cpp=cpp, cuda=cuda, functions=["smooth_l1_loss"])
    for group in range(GROUPS):
        jobs[f"wide{group}"] = dict(
            cpp=wide_cpp + DECL,
            cuda=wide_cuda + variant_source(group),
            functions=["smooth_l1_loss", "variant"],
        )

    def build(item):
        key, job = item
        start = time.time()
        try:
            ext = load_inline(
                name="i13_sl1_" + key,
                cpp_sources=job["cpp"],
                cuda_sources=job["cuda"],
                functions=job["functions"],
                extra_cflags=["-O3"],
                extra_cuda_cflags=["-O3"],
                verbose=False,
            )
            return key, ext, f"built in {time.time() - start:.0f} s"
        except Exception as error:  # a failed build is a result; the others go on
            return key, None, f"FAILED after {time.time() - start:.0f} s: {error}"[:3000]

    start = time.time()
    with ThreadPoolExecutor(len(jobs)) as pool:
        built = list(pool.map(build, jobs.items()))
    results["builds"] = {key: note for key, _, note in built}
    results["build_wall_s"] = round(time.time() - start, 1)
    print(f"builds: {results['builds']} ({results['build_wall_s']} s)", flush=True)
    exts = {key: ext for key, ext, _ in built if ext is not None}
    baselines = {n: exts[n].smooth_l1_loss for n in ("fast_cuda", "seed_cuda") if n in exts}
    variants = {}
    for group in range(GROUPS):
        ext = exts.get(f"wide{group}")
        if ext is None:
            continue
        if "wide (as shipped)" not in baselines:
            baselines["wide (as shipped)"] = ext.smooth_l1_loss
        for config in group_configs(group):
            for grid in GRIDS:
                variants[f"c{config} g{grid}"] = lambda a, b, beta, r, e=ext, c=config, g=grid: (
                    e.variant(a, b, beta, r, c, g)
                )
    return variants, baselines


def reference_module():
    spec = importlib.util.spec_from_file_location(
        "sl1_reference", ROOT / "problems" / "smooth_l1" / "reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_cases(ref) -> list[tuple[str, list[torch.Tensor], str, float]]:
    cases = []
    for index, case in enumerate(ref.CASES):
        torch.manual_seed(index)
        inputs = case.get("inputs", lambda: ref.make_inputs(3, 64, 56, 56))()
        reduction, beta = case.get("init_inputs", ["mean", 1.0])
        cases.append((case["name"], inputs, reduction, beta))
    torch.manual_seed(99)
    seed_shape = ref.make_inputs(ref.N, ref.C, ref.H, ref.W)
    for reduction in REDUCTIONS:
        cases.append((f"32x64x56x56 {reduction}", seed_shape, reduction, 1.0))
    return cases


def compare(got: torch.Tensor, exact: torch.Tensor) -> tuple[bool, float]:
    got, exact = got.double().reshape(-1), exact.reshape(-1)
    if got.shape != exact.shape:
        return False, float("inf")
    if not torch.equal(got.isnan(), exact.isnan()):
        return False, float("inf")
    keep = ~exact.isnan()
    if not keep.any():
        return True, 0.0
    ratio = ((got - exact).abs() / (1e-4 + 1e-4 * exact.abs()))[keep]
    worst = float(ratio.max())
    return worst <= 1.0, worst


def check_all(variants: dict, baselines: dict, ref) -> None:
    device = DEVICE
    prepared = []
    for name, inputs, reduction, beta in check_cases(ref):
        a, b = (replicate(t, device) for t in inputs)  # keeps the views' offsets and strides
        exact = ref.Model(reduction, beta)(a.double(), b.double())
        prepared.append((name, a, b, reduction, beta, exact))
    checks = results.setdefault("checks", {})
    calls = dict(variants)
    calls.update(baselines)
    for key, fn in calls.items():
        failures, worst = [], 0.0
        for name, a, b, reduction, beta, exact in prepared:
            try:
                ok, ratio = compare(fn(a, b, float(beta), REDUCTIONS.get(reduction, 0)), exact)
                torch.cuda.synchronize()
            except Exception as error:
                ok, ratio = False, float("inf")
                name = f"{name}: raised {error}"[:300]
            worst = max(worst, ratio)
            if not ok:
                failures.append(f"{name} (worst {ratio:.3g} x tol)")
        checks[key] = {"ok": not failures, "worst_err_over_tol": worst, "failures": failures}
        if failures:
            print(f"check {key}: FAILED {failures}", flush=True)
    print(f"checked {len(calls)}: {sum(c['ok'] for c in checks.values())} ok", flush=True)
    save()


class Named:
    """A zero-argument call with a name (CudaTimer keeps host time per name)."""

    def __init__(self, name: str, fn) -> None:
        self.name = name
        self.fn = fn

    def __call__(self):
        return self.fn()


def time_side_by_side(fns: dict, timer: CudaTimer, rounds: int = SAMPLES) -> dict:
    """Every call once per round, in an order that turns each round; per-name samples (us)."""
    names = list(fns)
    samples: dict[str, list[float]] = {name: [] for name in names}
    timer.run([Named(name, fns[name]) for name in names])  # warm-up (and the wait probe)
    done = 0
    while done < rounds:
        batch = min(5, rounds - done)
        order = []
        for r in range(done, done + batch):
            shift = r % len(names)
            order += names[shift:] + names[:shift]
        times = timer.run([Named(name, fns[name]) for name in order])
        for name, value in zip(order, times, strict=True):
            samples[name].append(value)
        done += batch
    return samples


def summarize(samples: dict, base: str) -> dict:
    rows = {}
    for name, values in samples.items():
        q = statistics.quantiles(values, n=4)
        ratios = [e / v for e, v in zip(samples[base], values, strict=True)]
        rows[name] = {
            "median_us": round(statistics.median(values), 2),
            "iqr_pct": round(100 * (q[2] - q[0]) / statistics.median(values), 1),
            "x_seed_module": round(statistics.median(ratios), 2),
        }
    return rows


def time_all(variants: dict, baselines: dict, ref, timer: CudaTimer) -> None:
    device = DEVICE
    timings = results.setdefault("timings", {})
    for batch, grids in ((ref.N, GRIDS), (128, BIG_GRIDS)):
        torch.manual_seed(5)
        a, b = (t.to(device) for t in ref.make_inputs(batch, ref.C, ref.H, ref.W))
        module = ref.Model("mean", 1.0)
        fns = {
            "seed module (eager)": lambda m=module, a=a, b=b: m(a, b),
            "F.smooth_l1_loss": lambda a=a, b=b: F.smooth_l1_loss(a, b),
        }
        chosen = {n: fn for n, fn in variants.items() if int(n.split(" g")[1]) in grids}
        fns.update(bind({**baselines, **chosen}, a, b))
        label = f"{batch}x64x56x56"
        timings[label] = summarize(time_side_by_side(fns, timer), "seed module (eager)")
        print(f"timed {label}", flush=True)
        save()


def bind(calls: dict, a: torch.Tensor, b: torch.Tensor) -> dict:
    """Zero-argument calls with 'mean', beta 1 on these inputs."""
    return {name: (lambda fn=fn: fn(a, b, 1.0, 1)) for name, fn in calls.items()}


def print_table() -> None:
    timings = results.get("timings", {})
    checks = results.get("checks", {})
    small, large = timings.get("32x64x56x56", {}), timings.get("128x64x56x56", {})
    names = sorted(small, key=lambda n: small[n]["median_us"])
    print(
        f"\n{'variant':22} {'config (threads, unroll, load, layout, tail)':44} {'check':5} "
        f"{'32x us':>8} {'IQR%':>5} {'x seed':>7} {'128x us':>8} {'x seed':>7}"
    )
    for name in names:
        config = ""
        if name.startswith("c") and " g" in name:
            index, grid = name[1:].split(" g")
            config = f"{CONFIGS[int(index)]} grid {grid}"
        ok = checks.get(name, {}).get("ok")
        big = large.get(name, {})
        print(
            f"{name:22} {config:44} {'-' if ok is None else 'ok' if ok else 'FAIL':5} "
            f"{small[name]['median_us']:8.2f} {small[name]['iqr_pct']:5.1f} "
            f"{small[name]['x_seed_module']:7.2f} {big.get('median_us', math.nan):8.2f} "
            f"{big.get('x_seed_module', math.nan):7.2f}"
        )
    base = small.get("seed module (eager)", {}).get("median_us")
    if base:
        print(f"8x the seed module needs <= {base / 8:.2f} us at 32x64x56x56")


def main() -> None:
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    major, minor = torch.cuda.get_device_capability()
    prepare_environment(BUILD_DIR, f"{major}.{minor}")
    results["device"] = torch.cuda.get_device_name()
    results["torch"] = torch.__version__
    start = time.time()
    ref = reference_module()
    variants, baselines = build_all()
    save()
    try:
        check_all(variants, baselines, ref)
        timer = CudaTimer(DEVICE)
        time_all(variants, baselines, ref, timer)
    except Exception:
        results["error"] = traceback.format_exc()
        print(results["error"], flush=True)
    results["wall_s"] = round(time.time() - start, 1)
    save()
    print_table()
    print(f"wall {results['wall_s']} s; written {OUT / 'smooth_l1_launch_configs.json'}")


if __name__ == "__main__":
    main()
