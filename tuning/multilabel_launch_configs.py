"""multilabel_margin's launch configurations: max_cuda in 3 load kinds x 6 launch configurations
against warp_cuda, eager and x.sum(), at 512x1024 and 4096x8192, with 1-16 labels per row
(issue 13).

Run on: the lent NVIDIA H200, at commit ec72e3d, 2026-12-01 ~01:27 UTC, 30 rounds. Recorded
output: tuning/results/multilabel_launch_configs.json and
tuning/results/multilabel_launch_configs_h200.txt.

Builds, in parallel (one load_inline each, distinct names, under .cache/tuning13/multilabel):
warp_cuda as shipped, and max_cuda's CUDA source once per stream-load kind (-DMLM_LOAD=0, 1, 2)
with a `variant(input, target, reduction, config)` entry point appended that launches
CONFIGS[config] (warps per block, float4 groups per lane per step, prefetch, min blocks per
SM). Variant "max L0 c0" is max_cuda as shipped (its macros' defaults).

Then checks every build against the float64 reference (F.multilabel_margin_loss on
float64 copies; |got - exact| <= 1e-4 + 1e-4 |exact|, NaN and inf where the reference has them)
on the problem's awkward cases, 512x1024 and 4096x8192, rows with NaN/inf scores, rows with
label scores beyond max_cuda's fast-path limit, and the invalid-label case (NaN); and times each
with 'mean' at 512x1024 and 4096x8192 as the harness does (harness.measure.timing.CudaTimer:
CUDA events around one call, L2 flushed by reading a 2x L2 buffer and host time hidden behind
a sleep before each call), SAMPLES rounds (default 50) with every variant and eager
F.multilabel_margin_loss once per round in a turning order. Speedup: the median over rounds of
eager / variant. Probes: x.sum() over the same x (the stream alone), and warp_cuda and max_cuda
with 1, 4, 8, 16 labels in every row (the arithmetic's share).

Run on the GPU: OUT=dir python3 tuning/multilabel_launch_configs.py; writes
OUT/multilabel_launch_configs.json (OUT defaults to tuning/results) and prints a table at the end.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import statistics
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
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
BUILD_DIR = ROOT / ".cache" / "tuning13" / "multilabel"
SOLUTIONS = ROOT / "solutions" / "multilabel_margin"
# (warps per block, groups per lane per step, prefetch, min blocks per SM); 0 is max_cuda's.
CONFIGS = [(8, 4, 1, 4), (8, 4, 0, 4), (8, 2, 1, 4), (8, 3, 1, 4), (4, 4, 1, 8), (16, 4, 1, 2)]
LOADS = {0: "ld.global.nc", 1: "ld.global.nc.L1::no_allocate", 2: "ld.global.cs"}
REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}
results: dict = {"samples": SAMPLES, "configs": CONFIGS, "loads": LOADS}


def save() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "multilabel_launch_configs.json").write_text(json.dumps(results, indent=1, default=str))


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


def variant_source() -> str:
    cases = "\n".join(
        f"    {'default' if i == len(CONFIGS) - 1 else f'case {i}'}: "
        f"return launch<{w}, {u}, {'true' if p else 'false'}, {m}>(x, y, r);"
        for i, (w, u, p, m) in enumerate(CONFIGS)
    )
    return f"""
torch::Tensor variant(torch::Tensor x, torch::Tensor y, int64_t r, int64_t config) {{
  TORCH_CHECK(config >= 0 && config < {len(CONFIGS)}, "no such config ", config);
  switch (config) {{
{cases}
  }}
}}
"""


def build_all() -> dict:
    """name -> callable(x, y, code) for every build that succeeded."""
    from torch.utils.cpp_extension import load_inline

    warp_cpp, warp_cuda = sources(SOLUTIONS / "warp_cuda.py")
    max_cpp, max_cuda = sources(SOLUTIONS / "max_cuda.py")
    decl = "\ntorch::Tensor variant(torch::Tensor x, torch::Tensor y, int64_t r, int64_t config);"
    jobs = {"warp": dict(cpp=warp_cpp, cuda=warp_cuda, functions=["multilabel_margin"], flags=[])}
    for load in LOADS:
        jobs[f"max L{load}"] = dict(
            cpp=max_cpp + decl,
            cuda=max_cuda + variant_source(),
            functions=["multilabel_margin", "variant"],
            flags=[f"-DMLM_LOAD={load}"],
        )

    def build(item):
        key, job = item
        start = time.time()
        try:
            ext = load_inline(
                name="i13_mlm_" + key.replace(" ", "_"),
                cpp_sources=job["cpp"],
                cuda_sources=job["cuda"],
                functions=job["functions"],
                extra_cflags=["-O3"],
                extra_cuda_cflags=["-O3", *job["flags"]],
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
    calls = {}
    for key, ext, _ in built:
        if ext is None:
            continue
        if key == "warp":
            calls["warp_cuda"] = ext.multilabel_margin
            continue
        for config in range(len(CONFIGS)):
            calls[f"{key} c{config}"] = lambda x, y, r, ext=ext, c=config: ext.variant(x, y, r, c)
    return calls


def reference_module():
    spec = importlib.util.spec_from_file_location(
        "mlm_reference", ROOT / "problems" / "multilabel_margin" / "reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def seeded(seed: int, make):
    torch.manual_seed(seed)
    np.random.seed(seed)
    return make()


def special_values(ref) -> list[torch.Tensor]:
    """NaN and +-inf scores, in non-target classes and in label classes (the exact path)."""
    x, y = ref.make_inputs(10, 200)
    x[0, 5] = float("nan")
    x[1, 7] = float("inf")
    x[2, 9] = -float("inf")
    for row, value in ((3, float("nan")), (4, float("inf")), (5, -float("inf"))):
        x[row, int(y[row, 0])] = value
    x[6, int(y[6, 0])] = 5000.0  # beyond the fast path's label-score limit
    y[7, :5] = torch.tensor([3, 3, 3, 9, -1])  # duplicates on the fast path
    y[7, 5:] = 0
    x[8] = 0.0  # ties everywhere
    x[9] = x[9] * 1e4  # large scores, label scores too
    return [x, y]


def check_cases(ref) -> list[tuple[str, list[torch.Tensor], str]]:
    by_name = {case["name"]: case for case in ref.CASES}
    cases: list[tuple[str, list[torch.Tensor], str]] = []
    for name in (
        "7x37",
        "no labels",
        "all labels",
        "duplicate labels",
        "labels after -1",
        "N=1",
        "13x4099",
        "C=10000 all labels",
        "C=40000 3000 labels",
        "unbatched",
        "unbatched none",
        "strided view",
        "offset view",
    ):
        case = by_name[name]
        inputs = seeded(len(cases), case.get("inputs", ref.get_inputs))
        cases.append((name, inputs, case.get("init_inputs", ["mean"])[0]))
    big = seeded(100, lambda: ref.make_inputs(512, 1024))
    huge = seeded(101, lambda: ref.make_inputs(4096, 8192))
    for reduction in REDUCTIONS:
        cases.append((f"512x1024 {reduction}", big, reduction))
    cases.append(("4096x8192 none", huge, "none"))
    cases.append(("4096x8192 mean", huge, "mean"))
    cases.append(("special values none", seeded(102, lambda: special_values(ref)), "none"))
    scaled = seeded(103, lambda: ref.make_inputs(64, 515))
    cases.append(("scores x300 none", [scaled[0] * 300, scaled[1]], "none"))
    return cases


def call(fn, x: torch.Tensor, y: torch.Tensor, reduction: str) -> torch.Tensor:
    out = fn(x, y, REDUCTIONS[reduction])
    return out.reshape(()) if reduction == "none" and x.dim() < 2 else out


def compare(got: torch.Tensor, exact: torch.Tensor) -> tuple[bool, float, str]:
    """Whether got passes against the float64 answer; the worst error over the tolerance."""
    got, exact = got.double().cpu().reshape(-1), exact.cpu().reshape(-1)
    if got.shape != exact.shape:
        return False, float("inf"), f"shape {tuple(got.shape)} != {tuple(exact.shape)}"
    nan_ok = torch.equal(got.isnan(), exact.isnan())
    inf_ok = torch.equal(got.isinf(), exact.isinf()) and torch.equal(
        got[got.isinf()], exact[exact.isinf()]
    )
    finite = exact.isfinite() & got.isfinite()
    ratio = ((got - exact).abs() / (1e-4 + 1e-4 * exact.abs()))[finite]
    worst = float(ratio.max()) if ratio.numel() else 0.0
    note = "" if nan_ok and inf_ok else "NaN/inf placement differs"
    return nan_ok and inf_ok and worst <= 1.0, worst, note


def check_all(calls: dict, ref) -> None:
    cases = check_cases(ref)
    device = DEVICE
    prepared = []
    for name, (x, y), reduction in cases:
        x, y = replicate(x, device), replicate(y, device)  # keeps offsets and strides
        exact = F.multilabel_margin_loss(x.double(), y, reduction=reduction)
        prepared.append((name, x, y, reduction, exact))
    invalid = seeded(104, ref.CASES[-1]["inputs"])
    invalid = [t.to(device) for t in invalid]
    checks = results.setdefault("checks", {})
    for key, fn in calls.items():
        failures, worst = [], 0.0
        for name, x, y, reduction, exact in prepared:
            try:
                ok, ratio, note = compare(call(fn, x, y, reduction), exact)
                torch.cuda.synchronize()
            except Exception as error:
                ok, ratio, note = False, float("inf"), f"raised {error}"[:300]
            worst = max(worst, ratio)
            if not ok:
                failures.append(f"{name}: worst {ratio:.3g} x tol {note}")
        out = call(fn, invalid[0], invalid[1], "none").cpu()
        if not (out[1].isnan() and out[2].isnan() and out[[0, 3]].isfinite().all()):
            failures.append(f"invalid labels: expected NaN in rows 1, 2 only, got {out.tolist()}")
        checks[key] = {"ok": not failures, "worst_err_over_tol": worst, "failures": failures}
        print(f"check {key}: {failures or 'ok'} (worst {worst:.3g})", flush=True)
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
        batch = min(10, rounds - done)
        order = []
        for r in range(done, done + batch):
            shift = r % len(names)
            order += names[shift:] + names[:shift]
        times = timer.run([Named(name, fns[name]) for name in order])
        for name, value in zip(order, times, strict=True):
            samples[name].append(value)
        done += batch
    return samples


def summarize(samples: dict, eager: str) -> dict:
    rows = {}
    for name, values in samples.items():
        q = statistics.quantiles(values, n=4)
        ratios = [e / v for e, v in zip(samples[eager], values, strict=True)]
        rows[name] = {
            "median_us": round(statistics.median(values), 2),
            "iqr_pct": round(100 * (q[2] - q[0]) / statistics.median(values), 1),
            "speedup": round(statistics.median(ratios), 2),
        }
    return rows


def time_all(calls: dict, ref, timer: CudaTimer) -> None:
    device = DEVICE
    timings = results.setdefault("timings", {})
    for shape in ((512, 1024), (4096, 8192)):
        x, y = (t.to(device) for t in seeded(7, lambda s=shape: ref.make_inputs(*s)))
        fns = bind(calls, x, y)
        fns["eager"] = lambda x=x, y=y: F.multilabel_margin_loss(x, y)
        fns["x.sum() (stream only)"] = lambda x=x: x.sum()
        label = f"{shape[0]}x{shape[1]}"
        timings[label] = summarize(time_side_by_side(fns, timer), "eager")
        print(f"timed {label}", flush=True)
        save()


def bind(calls: dict, x: torch.Tensor, y: torch.Tensor) -> dict:
    """Zero-argument calls with 'mean' on these inputs."""
    return {name: (lambda fn=fn: fn(x, y, 1)) for name, fn in calls.items()}


def probe_labels(calls: dict, ref, timer: CudaTimer) -> None:
    """warp_cuda and max_cuda with n labels in every row at 4096x8192."""
    device = DEVICE
    probes = results.setdefault("labels_probe", {})
    for labels in (1, 4, 8, 16):
        x, y = (t.to(device) for t in seeded(8, lambda n=labels: ref.make_inputs(4096, 8192, n, n)))
        fns = bind({n: calls[n] for n in ("warp_cuda", "max L0 c0") if n in calls}, x, y)
        samples = time_side_by_side(fns, timer, rounds=max(10, SAMPLES // 2))
        probes[f"{labels} labels"] = {n: round(statistics.median(v), 2) for n, v in samples.items()}
        print(f"probe {labels} labels: {probes[f'{labels} labels']}", flush=True)
        save()


def print_table() -> None:
    timings = results.get("timings", {})
    checks = results.get("checks", {})
    names = sorted(
        timings.get("4096x8192", {}),
        key=lambda n: timings["4096x8192"][n]["median_us"],
    )
    print(
        f"\n{'variant':28} {'check':6} {'512x1024 us':>12} {'x eager':>8} {'4096x8192 us':>13} "
        f"{'x eager':>8} {'IQR%':>5}"
    )
    for name in names:
        small = timings.get("512x1024", {}).get(name, {})
        large = timings["4096x8192"][name]
        ok = checks.get(name, {}).get("ok")
        nan = float("nan")
        print(
            f"{name:28} {'-' if ok is None else 'ok' if ok else 'FAIL':6} "
            f"{small.get('median_us', nan):12.2f} {small.get('speedup', nan):8.2f} "
            f"{large['median_us']:13.2f} {large['speedup']:8.2f} {large['iqr_pct']:5.1f}"
        )
    print("configs (warps, groups per step, prefetch, min blocks/SM):", dict(enumerate(CONFIGS)))
    print("loads:", LOADS)
    for labels, row in results.get("labels_probe", {}).items():
        print(f"probe {labels}: {row}")


def main() -> None:
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    major, minor = torch.cuda.get_device_capability()
    prepare_environment(BUILD_DIR, f"{major}.{minor}")
    results["device"] = torch.cuda.get_device_name()
    results["torch"] = torch.__version__
    start = time.time()
    ref = reference_module()
    calls = build_all()
    save()
    try:
        check_all(calls, ref)
        timer = CudaTimer(DEVICE)
        time_all(calls, ref, timer)
        probe_labels(calls, ref, timer)
    except Exception:
        results["error"] = traceback.format_exc()
        print(results["error"], flush=True)
    results["wall_s"] = round(time.time() - start, 1)
    save()
    print_table()
    print(f"wall {results['wall_s']} s; written {OUT / 'multilabel_launch_configs.json'}")


if __name__ == "__main__":
    main()
