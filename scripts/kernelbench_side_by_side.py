"""Set `run.py --as kernelbench` beside KernelBench's own evaluator, pair by pair.

KernelBench's code is not part of this repository: pass a checkout of it (its `src/` holds the
`kernelbench` package), kept outside the repository. Two steps, on a GPU machine, after a
harness sweep of the same pairs has built them (`run.py --problems P --solutions S`):

  measure KB_CHECKOUT PROBLEMS SOLUTIONS BUILD_DIR OUT.jsonl [--trials N] [--no-timing]
          [--resume] [--only N,N] [--shard K/N] [--tf32 default|off]
      For each KernelBench problem file N_*.py in PROBLEMS and its sample
      level_<L>_problem_<N>_sample_0_kernel.py in SOLUTIONS, in one process: KernelBench's
      `load_custom_model` (pointed at the build this harness left under BUILD_DIR, in the
      environment the harness's worker built it in, so nothing is compiled again; where there
      is none, KernelBench's load_inline builds it), its
      `run_and_check_correctness` (5 trials, seed 42; the problem's `get_inputs` run with the
      GPU as torch's default device, as the harness runs it, so inputs of GBs are drawn there),
      then `time_execution_with_cuda_event`
      (N trials, 100 unless given: its num_perf_trials) on the new model and then the
      reference, autograd on, as `eval_kernel_against_ref` does. One JSON line per pair:
      correctness, the two means (ms, as KernelBench rounds them and unrounded), every trial.
      With --no-timing, the correctness check alone: the same line without the timing fields.
      A pair that fails (loading, building, a CUDA error) is its line's `error` (the error's
      type and first line) and the sweep goes on; where the failure leaves the CUDA context
      unusable, its line says so in `cuda_context` and the step stops, exit status 3. With
      --resume, the problems already in OUT.jsonl are skipped, so a new process goes on there
      (a pair the last process died in, named in OUT.jsonl.current, is recorded as such).
      --only takes the problems of these numbers; --shard K/N every Nth problem from the Kth
      (0-based), so that N processes, each with its own OUT.jsonl, share a level. --tf32 off
      turns TF32 off for cuDNN and matmuls before anything runs (the harness's default
      profile); `default` (the default) leaves PyTorch's settings, as KernelBench does. Each
      line has `seconds`: loading (the build's import), the check, and the timing.
  table OUT.jsonl PROFILE_FOLDER DEFAULT_FOLDER [--trials N]
      A markdown table: KernelBench's verdict and speedup beside the profile's and the default
      timer's (the machine folders the sweeps wrote: <results>/<gpu>-kernelbench and
      <results>/<gpu>), with their ratios, the per-call speedup, and the geometric means.
      With --trials N, KernelBench's and the profile's means are those of their first N
      trials: what a run of N trials would have given, from a longer one.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import stats, toolchain

NUMBER = re.compile(r"(?:level_\d+_problem_)?(\d+)_")
PROFILE_GAP, DEFAULT_GAP = 0.05, 0.10  # the bounds on profile/KB and default/KB


def number(name: str) -> int | None:
    found = NUMBER.match(name)
    return int(found.group(1)) if found else None


def import_kernelbench(checkout: Path) -> tuple[Any, Any]:
    """KernelBench's eval and timing modules. What its utils module imports for the LLM
    clients and the dataset (and the evaluator never calls) is stood in for where it is not
    installed; pydantic, which eval's result type needs, must be there (KB_WHEELS)."""
    stand_ins: dict[str, dict[str, Any]] = {
        "openai": {"OpenAI": None},
        "litellm": {"completion": None},
        "dotenv": {"load_dotenv": lambda *args, **kwargs: False},  # called at import
        "tqdm": {"tqdm": None},
        "requests": {},
    }
    for name, attributes in stand_ins.items():
        try:
            __import__(name)
        except ImportError:
            stand_in = types.ModuleType(name)
            for attribute, value in attributes.items():
                setattr(stand_in, attribute, value)
            sys.modules[name] = stand_in
    sys.path.insert(0, str(checkout / "src"))
    from kernelbench import eval as kb_eval
    from kernelbench import timing as kb_timing

    return kb_eval, kb_timing


CONTEXT_LOST = 3  # the exit status when a CUDA error leaves the context unusable


def first_line(err: BaseException) -> str:
    """An error's type and the first line of its message, as a row records it."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0] if lines else ''}"[:300]


def measured(out: Path) -> set[str]:
    """The problems OUT.jsonl already has a line for (a line cut short by a crash is skipped).
    A pair the last process was on when it died (OUT.jsonl.current names it: a hang past the
    step's timeout, a segfault) gets its line now, so that the sweep does not meet it again."""
    done: set[str] = set()
    for line in out.read_text().splitlines() if out.exists() else []:
        try:
            done.add(json.loads(line)["problem"])
        except (ValueError, KeyError, TypeError):
            continue
    current = _current(out)
    stem = current.read_text().strip() if current.exists() else ""
    if stem and stem not in done:
        _append(out, {"problem": stem, "error": "the previous process ended during this pair"})
        done.add(stem)
    return done


def _current(out: Path) -> Path:
    """The file that names the pair under way, beside OUT.jsonl."""
    return out.with_name(out.name + ".current")


def _append(out: Path, row: dict[str, Any]) -> None:
    print(json.dumps(row), flush=True)
    with open(out, "a") as log:
        log.write(json.dumps(row) + "\n")


def context_lost(device: Any) -> str | None:
    """None while the CUDA context still runs work; else the first line of what the probe
    raised (an illegal address or a device-side assert is sticky: every later call fails)."""
    import gc

    import torch

    gc.collect()
    try:
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        (torch.ones(1, device=device) + 1).item()
    except Exception as err:  # whatever the probe raises, the context cannot go on
        return first_line(err)
    return None


def measure(args: argparse.Namespace) -> None:
    kb_eval, kb_timing = import_kernelbench(Path(args.checkout))
    import torch

    from harness.measure import builds, pch

    # The harness's changes to a build's commands, made the same way here, so that its builds
    # are up to date for KernelBench's load_inline too, rather than compiled again.
    builds.install()
    # Absolute paths, as the harness's worker builds with: ninja compares each command line,
    # and a relative build folder would give other ones, so everything would compile again.
    args.build_dir = str(Path(args.build_dir).resolve())
    pch.install(Path(args.build_dir))

    if args.tf32 == "off":
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    device = torch.device("cuda:0")
    torch.cuda.set_device(device)
    arch = toolchain.arch_list(torch.cuda.get_device_capability(device), None)
    solutions = {number(p.name): p for p in Path(args.solutions).glob("level_*_sample_0_*.py")}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = measured(out) if args.resume else set()
    for problem in chosen(Path(args.problems), args.only, args.shard):
        solution = solutions.get(number(problem.name))
        if solution is None or problem.stem in done:
            continue
        _current(out).write_text(problem.stem)
        row = _measure_pair(kb_eval, kb_timing, problem, solution, args, device, arch)
        lost = context_lost(device)
        if lost:
            row["cuda_context"] = f"unusable after this pair ({lost}); the step stopped here"
        _append(out, row)
        _current(out).unlink()
        if lost:
            print(f"CUDA context lost at {problem.stem}: go on with --resume", file=sys.stderr)
            sys.exit(CONTEXT_LOST)


def chosen(problems: Path, only: str | None, shard: str | None) -> list[Path]:
    """The problem files of PROBLEMS in number order, narrowed by --only and --shard."""
    files = sorted(problems.glob("*.py"), key=lambda p: number(p.name) or 0)
    if only:
        wanted = {int(n) for n in only.split(",")}
        files = [f for f in files if number(f.name) in wanted]
    if shard:
        index, count = (int(n) for n in shard.split("/"))
        files = files[index::count]
    return files


def _measure_pair(
    kb_eval: Any,
    kb_timing: Any,
    problem: Path,
    solution: Path,
    args: argparse.Namespace,
    device: Any,
    arch: Any,
) -> dict[str, Any]:
    """One pair's row: its build, then its verdict (and timing), or the error that stopped it."""
    folder = toolchain.build_folder(Path(args.build_dir), problem.stem, solution, arch)
    built = [str(folder)] if folder.is_dir() else []
    row: dict[str, Any] = {"problem": problem.stem, "build_dir": built[0] if built else None}
    row["tf32"] = args.tf32
    started = time.perf_counter()
    try:
        if built:  # the environment the harness's worker built in, so nothing builds again
            toolchain.prepare_environment(Path(built[0]), arch)
        pair = (problem, solution, row["build_dir"], device, args.trials, not args.no_timing)
        row.update(_one_pair(kb_eval, kb_timing, *pair))
    except Exception as err:  # a failure is this pair's row, not the end of the run
        row["error"] = first_line(err)
    row["wall_s"] = round(time.perf_counter() - started, 2)
    return row


def _one_pair(
    kb_eval: Any,
    kb_timing: Any,
    problem: Path,
    solution: Path,
    build: str | None,
    device: Any,
    trials: int,
    timing: bool = True,
) -> dict[str, Any]:
    """eval_kernel_against_ref's steps on one pair, with KernelBench's own functions."""
    import torch

    context: dict[str, Any] = {}  # one namespace for both files, as eval_kernel_against_ref has
    loaded = kb_eval.load_original_model_and_inputs(problem.read_text(), context)
    if loaded is None:
        raise RuntimeError("KernelBench could not load the problem (its load returned None)")
    model, get_init_inputs, drawn_on_host = loaded

    def get_inputs() -> Any:  # drawn on the GPU, as the harness draws them (harness.loading)
        with torch.device(device):
            return drawn_on_host()

    started = time.perf_counter()
    model_new = kb_eval.load_custom_model(solution.read_text(), context, build)
    seconds = {"load": round(time.perf_counter() - started, 2)}
    if model_new is None:
        raise RuntimeError("KernelBench could not load ModelNew (a syntax error, or none defined)")
    kb_eval.set_seed(42)
    init = [kb_eval._process_input_tensor(x, device) for x in get_init_inputs()]
    with torch.no_grad():
        kb_eval.set_seed(42)
        reference = model(*init).to(device=device, dtype=torch.float32)
        kb_eval.set_seed(42)
        new = model_new(*init).to(device=device, dtype=torch.float32)
    result = kb_eval.run_and_check_correctness(
        reference, new, get_inputs, {}, num_correct_trials=5, seed=42, device=device
    )
    seconds["check"] = round(time.perf_counter() - started - seconds["load"], 2)
    row: dict[str, Any] = {"correctness": bool(result.correctness), "seconds": seconds}
    if not result.correctness:
        row["metadata"] = {k: str(v)[:300] for k, v in result.metadata.items()}
        if "runtime_error" in result.metadata:  # what ModelNew raised, as KernelBench caught it
            message = str(result.metadata["runtime_error"]).strip().splitlines() or [""]
            row["error"] = f"{result.metadata.get('runtime_error_name')}: {message[0]}"[:300]
        return row
    if timing:
        row.update(_timing(kb_eval, kb_timing, reference, new, get_inputs, device, trials))
        seconds["timing"] = round(time.perf_counter() - started - sum(seconds.values()), 2)
    return row


def _timing(
    kb_eval: Any,
    kb_timing: Any,
    reference: Any,
    new: Any,
    get_inputs: Any,
    device: Any,
    trials: int,
) -> dict[str, Any]:
    """time_execution_with_cuda_event on the new model, then the reference: every trial, the
    means (as KernelBench rounds them, and unrounded), the medians and the speedup."""
    row: dict[str, Any] = {}
    for name, timed in (("runtime", new), ("ref_runtime", reference)):
        kb_eval.set_seed(42)
        inputs = [kb_eval._process_input_tensor(x, device) for x in get_inputs()]
        times = kb_timing.time_execution_with_cuda_event(
            timed, inputs, num_trials=trials, verbose=False, device=device
        )
        row[f"{name}_times"] = [round(t, 6) for t in times]
        stats = kb_timing.get_timing_stats(times, device=device)
        row[name], row[f"{name}_stats"] = stats["mean"], stats
        row[f"{name}_unrounded"] = sum(times) / len(times)
        row[f"{name}_median"] = sorted(times)[len(times) // 2]
    row["speedup"] = row["ref_runtime_unrounded"] / row["runtime_unrounded"]
    return row


def latest(folder: str) -> dict[int, dict[str, Any]]:
    """The newest record of each problem in a harness machine folder, by problem number."""
    found: dict[int, dict[str, Any]] = {}
    log = Path(folder) / "runs.jsonl"
    for line in log.read_text().splitlines() if log.exists() else []:
        record = json.loads(line)
        key = number(record.get("problem", ""))
        if key is not None and "status" in record:
            found[key] = record
    return found


def _mean_ratio(reference: list[float], solution: list[float], first: int | None) -> float:
    """The mean of the reference's first `first` trials over the solution's (all if None)."""
    return stats.mean_ratio(reference[:first], solution[:first]).value


def _speedups(
    record: dict[str, Any] | None, first: int | None = None
) -> tuple[float | None, float | None, str]:
    """(device speedup, per-call speedup, host-bound side) of a record's first row; with
    `first`, the device speedup is that of the first `first` trials of each side."""
    rows = (record or {}).get("benchmarks") or []
    if not rows:
        return None, None, ""
    per_call = rows[0].get("per_call") or {}
    device = rows[0]["speedup"]["value"]
    if first:
        device = _mean_ratio(
            rows[0]["reference"]["times_us"], rows[0]["solution"]["times_us"], first
        )
    return device, per_call.get("speedup", {}).get("value"), rows[0].get("host_bound") or ""


def _kb_speedup(row: dict[str, Any], first: int | None) -> float | None:
    """KernelBench's speedup of a measured pair; with `first`, of its first `first` trials."""
    if first and "runtime_times" in row:
        return _mean_ratio(row["ref_runtime_times"], row["runtime_times"], first)
    return row.get("speedup")


def _cell(value: float | None, digits: int = 2) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _geomean(values: list[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def table(args: argparse.Namespace) -> None:
    kb = {number(r["problem"]): r for r in map(json.loads, Path(args.kb).read_text().splitlines())}
    profile, default = latest(args.profile), latest(args.default)
    header = "problem | KernelBench | profile | KB speedup | profile | profile/KB | default"
    print(f"| {header} | default/KB | per call | host-bound |\n|{'---|' * 10}")
    columns: dict[str, list[float]] = {k: [] for k in ("kb", "profile", "p/kb", "default", "d/kb")}
    for key in sorted(k for k in kb if k is not None):
        theirs, ours, plain = kb[key], profile.get(key), default.get(key)
        kb_speedup = _kb_speedup(theirs, args.trials)
        ours_speedup, per_call, bound = _speedups(ours, args.trials)
        plain_speedup = _speedups(plain)[0]
        ratio = ours_speedup / kb_speedup if ours_speedup and kb_speedup else None
        plain_ratio = plain_speedup / kb_speedup if plain_speedup and kb_speedup else None
        values = (kb_speedup, ours_speedup, ratio, plain_speedup, plain_ratio)
        for name, value in zip(columns, values, strict=True):
            if value:
                columns[name].append(value)
        verdict = "correct" if theirs.get("correctness") else theirs.get("error", "incorrect")
        cells = [theirs["problem"], verdict, (ours or {}).get("status", "-"), _cell(kb_speedup)]
        cells += [_cell(ours_speedup), _cell(ratio, 3), _cell(plain_speedup), _cell(plain_ratio, 3)]
        print("| " + " | ".join([*cells, _cell(per_call), bound]) + " |")
    means = {name: _geomean(values) for name, values in columns.items()}
    print("\nGeometric means: " + ", ".join(f"{k} {_cell(v, 3)}" for k, v in means.items()))
    off = [v for v in columns["p/kb"] if abs(v - 1) > PROFILE_GAP]
    apart = [v for v in columns["d/kb"] if abs(v - 1) > DEFAULT_GAP]
    print(f"Rows where the profile parts from KernelBench by more than 5%: {len(off)}")
    print(f"Rows where the default timer parts from KernelBench by more than 10%: {len(apart)}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    steps = parser.add_subparsers(dest="step", required=True)
    step = steps.add_parser("measure")
    for name in ("checkout", "problems", "solutions", "build_dir", "out"):
        step.add_argument(name)
    step.add_argument("--trials", type=int, default=100, help="KernelBench's num_perf_trials")
    step.add_argument(
        "--no-timing", action="store_true", help="KernelBench's correctness check alone"
    )
    step.add_argument(
        "--resume", action="store_true", help="skip the problems already in OUT.jsonl"
    )
    step.add_argument("--only", help="the problem numbers to measure, as 19,20,26")
    step.add_argument("--shard", help="K/N: every Nth problem from the Kth (0-based)")
    step.add_argument(
        "--tf32",
        choices=("default", "off"),
        default="default",
        help="off: TF32 off for cuDNN and matmuls; default: PyTorch's, as KernelBench",
    )
    step = steps.add_parser("table")
    for name in ("kb", "profile", "default"):
        step.add_argument(name)
    step.add_argument("--trials", type=int, help="use only each side's first N trials")
    args = parser.parse_args(argv)
    (measure if args.step == "measure" else table)(args)


if __name__ == "__main__":
    main()
