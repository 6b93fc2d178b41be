"""sum_reduce and softmax: the notes' and the fast CUDA solutions against PyTorch (issue 13).

Not run: written for issue 13, but the session's GPU time went to the harness's own runs, so
there is no machine, commit, date or recorded output to give; it
prints its results and writes no file.

Runs on a GPU: python3 tuning/sum_reduce_softmax_vs_torch.py [--samples N] [--flush write|read]
[--problem sum_reduce|softmax] [--skip-notes]

1. Builds the solutions (solutions/<problem>/{fast,notes}_cuda.py).
2. Checks each on every case of problems/<problem>/reference.py, inputs placed on the GPU with
   their strides and storage offset: the largest error against a float64 evaluation of the
   reference, next to PyTorch float32's own. A case passes when each element is within the
   problem's ATOL/RTOL of the float32 reference, or within 32 times the larger of PyTorch's own
   error there and its median error, plus 2 ulps (a rough form of the harness's rule, without
   its extra draws), with NaN where the reference has NaN.
3. Times each solution and eager PyTorch at each benchmark shape: CUDA events around one call,
   a 256 MiB buffer written (or, with --flush read, read) before each call, median of N calls
   (default 30), as GB/s of the least bytes (inputs read once, output written once) and as a
   share of a 256 MiB device-to-device copy timed the same way.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
FLUSH_BYTES = 256 * 2**20


def load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def on_device(x):
    """x on the GPU with the same shape, strides and storage offset (odd offsets stay odd)."""
    if not isinstance(x, torch.Tensor):
        return x
    storage = torch.empty(0, dtype=x.dtype).set_(x.untyped_storage()).cuda()
    return storage.as_strided(x.shape, x.stride(), x.storage_offset())


def ulp(x: torch.Tensor) -> torch.Tensor:
    x32 = x.float().abs()
    return (torch.nextafter(x32, torch.full_like(x32, float("inf"))) - x32).double()


def check_case(reference, solution_cls, case, atol, rtol) -> tuple[bool, str]:
    init = case.get("init_inputs", reference.get_init_inputs())
    inputs = [on_device(x) for x in case.get("inputs", reference.get_inputs)()]
    model = reference.Model(*init).cuda()
    ours = solution_cls(*init).cuda()
    with torch.no_grad():
        out = ours(*inputs)
        expected = model(*inputs)
        exact = model(*[x.double() if isinstance(x, torch.Tensor) else x for x in inputs])
    torch.cuda.synchronize()
    if out.shape != expected.shape or out.dtype != expected.dtype:
        return False, f"shape/dtype {tuple(out.shape)} {out.dtype}, want {tuple(expected.shape)}"
    if out.numel() == 0:
        return True, "empty"
    nan_ok = torch.equal(torch.isnan(out), torch.isnan(expected))
    finite = ~torch.isnan(exact)
    err = (out.double() - exact).abs()[finite]
    own = (expected.double() - exact).abs()[finite]
    gap = (out.double() - expected.double()).abs()[finite]
    within_tol = gap <= atol + rtol * expected.double().abs()[finite]
    scale = torch.maximum(own, own.median()) if own.numel() else own
    within_rule = err <= 32 * scale + 2 * ulp(exact[finite])
    ok = nan_ok and bool((within_tol | within_rule).all())
    worst = float(err.max()) if err.numel() else 0.0
    own_worst = float(own.max()) if own.numel() else 0.0
    nan_note = "" if nan_ok else ", NaN mismatch"
    return ok, f"max err {worst:.3g} (torch float32's own {own_worst:.3g}){nan_note}"


def make_flush(mode: str):
    buffer = torch.empty(FLUSH_BYTES // 4, dtype=torch.float32, device="cuda")
    if mode == "write":
        return lambda: buffer.fill_(1.0)
    return lambda: buffer.sum()


def time_us(call, flush, samples: int) -> float:
    for _ in range(3):
        call()
    times = []
    for _ in range(samples):
        flush()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def least_bytes(inputs, output) -> int:
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)] + [output]
    return sum(t.numel() * t.element_size() for t in tensors)


def copy_gbs(flush, samples: int) -> float:
    src = torch.randn(FLUSH_BYTES // 4, device="cuda")
    dst = torch.empty_like(src)
    us = time_us(lambda: dst.copy_(src), flush, samples)
    return 2 * FLUSH_BYTES / us / 1e3


def time_benchmark(reference, solutions, bench, flush, samples: int) -> tuple[dict, int]:
    """Median microseconds of eager PyTorch and of each solution on one benchmark, and the
    least bytes it moves."""
    torch.manual_seed(0)
    init = bench.get("init_inputs", reference.get_init_inputs())
    inputs = [on_device(x) for x in bench.get("inputs", reference.get_inputs)()]
    model = reference.Model(*init).cuda()
    with torch.no_grad():
        nbytes = least_bytes(inputs, model(*inputs))
        row = {"torch": time_us(lambda: model(*inputs), flush, samples)}
        for name, cls in solutions.items():
            ours = cls(*init).cuda()
            row[name] = time_us(lambda ours=ours: ours(*inputs), flush, samples)
    return row, nbytes


def run_problem(problem: str, args, flush, copy: float) -> bool:
    reference = load_module(ROOT / "problems" / problem / "reference.py", f"{problem}_reference")
    names = ["fast_cuda"] if args.skip_notes else ["fast_cuda", "notes_cuda"]
    solutions = {}
    for name in names:
        print(f"building {problem}/{name} ...", flush=True)
        solutions[name] = load_module(
            ROOT / "solutions" / problem / f"{name}.py", f"{problem}_{name}"
        ).ModelNew
    atol, rtol = getattr(reference, "ATOL", 1e-4), getattr(reference, "RTOL", 1e-4)

    all_ok = True
    cases = [{"name": "default"}, *getattr(reference, "CASES", [])]
    for name, cls in solutions.items():
        for case in cases:
            torch.manual_seed(1)
            try:
                ok, detail = check_case(reference, cls, case, atol, rtol)
            except Exception as err:  # report and go on
                ok, detail = False, f"raised {type(err).__name__}: {err}"
            all_ok &= ok
            print(f"  {problem}/{name} {case['name']:>24}: {'ok  ' if ok else 'FAIL'} {detail}")

    benchmarks = getattr(reference, "BENCHMARKS", [])
    print(
        f"\n{problem}: median us of {args.samples} calls, flush by {args.flush}; "
        f"copy {copy:.0f} GB/s"
    )
    for bench in [{"name": "default"}, *benchmarks]:
        row, nbytes = time_benchmark(reference, solutions, bench, flush, args.samples)
        cells = []
        for name, us in row.items():
            gbs = nbytes / us / 1e3
            cells.append(f"{name} {us:9.1f} us {gbs:6.0f} GB/s {100 * gbs / copy:4.0f}%")
        print(f"  {bench['name']:>20}: " + " | ".join(cells))
        torch.cuda.empty_cache()
    return all_ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--flush", choices=["write", "read"], default="write")
    parser.add_argument("--problem", choices=["sum_reduce", "softmax"], action="append")
    parser.add_argument("--skip-notes", action="store_true")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    flush = make_flush(args.flush)
    copy = copy_gbs(flush, args.samples)
    device = torch.cuda.get_device_name()
    print(f"{device}, torch {torch.__version__}; 256 MiB copy: {copy:.0f} GB/s")
    ok = True
    for problem in args.problem or ["sum_reduce", "softmax"]:
        ok &= run_problem(problem, args, flush, copy)
    print("\nall cases pass" if ok else "\nSOME CASES FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
