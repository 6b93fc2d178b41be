"""Build, check and time one solution; runs inside a process spawned by isolate.py.

Steps, each announced to the parent over a pipe (`phase` messages), the last message being
the result (`result`). Everything printed, by the harness, the compiler or the solution, goes
to the job's log file, never into the pipe.

  load   import the solution (its extensions build here) and find ModelNew
  check  every correctness case of the problem, `trials` times each with fresh inputs
  time   every benchmark of the problem: check once more, then time reference and solution
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness import status
from harness.builds import BuildWatcher, NoCudaToolchain
from harness.errors import UserError
from harness.loading import Case, Problem, import_file, load_problem
from harness.toolchain import build_folder, find_cuda_home, prepare_environment

CASE_SEED_STRIDE = 1000  # case k draws its trials from seeds seed + 1000 k + 1, 2, ...
BENCHMARK_SEED_OFFSET = 500_000


@dataclass(frozen=True)
class Job:
    """Everything a worker needs; plain values so it crosses the process boundary."""

    problem: str
    reference: str
    solution: str
    device: str
    trials: int
    seed: int
    warmup: int
    reps: int
    cache_dir: str
    arch: str
    log_path: str
    content_hash: str
    atol: float | None = None
    rtol: float | None = None


class Verdict(Exception):
    """Ends the job early with a status and a one-line detail."""

    def __init__(self, verdict: str, detail: str) -> None:
        super().__init__(detail)
        self.status = verdict
        self.detail = detail


Send = Callable[..., None]


def main(job: Job, conn: Any) -> None:
    """Process entry point: run the job, send its result, exit."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    log = _redirect_output(job.log_path)
    faulthandler.enable(log)

    def send(kind: str, **data: Any) -> None:
        conn.send({"kind": kind, **data})

    print(f"job: {asdict(job)}", flush=True)
    result = run(job, send)
    print(f"result: {result['status']}: {result['detail']}", flush=True)
    send("result", **result)
    conn.close()


def _redirect_output(log_path: str) -> Any:
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 (lives with the process)
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(line_buffering=True)
    return log


def run(job: Job, send: Send) -> dict[str, Any]:
    """Run the job's steps; any failure becomes a status and a one-line detail."""
    result: dict[str, Any] = {"status": status.OK, "detail": "", "benchmarks": [], "checks": 0}
    watcher: BuildWatcher | None = None
    try:
        send("phase", phase="load")
        problem, device = _setup(job)
        watcher = BuildWatcher(send, _cuda_unavailable(), Path(job.log_path))
        watcher.install()
        model_new = _load_solution(job, device, watcher)
        device = _device_for(device, watcher)
        result["device"] = str(device)
        send("phase", phase="check")
        result["checks"] = _check_cases(job, problem, model_new, device)
        send("phase", phase="time")
        result["benchmarks"] = _time_benchmarks(job, problem, model_new, device)
    except Verdict as verdict:
        result.update(status=verdict.status, detail=verdict.detail)
    except SystemExit as exit_:
        traceback.print_exc()
        result.update(status=status.CRASHED, detail=f"the solution called sys.exit({exit_.code})")
    except BaseException as err:  # the harness's own bug: still a row, with a traceback logged
        traceback.print_exc()
        result.update(status=status.RUNTIME_ERROR, detail=f"harness error: {_describe(err)}")
    if watcher is not None:
        result["builds"] = [asdict(b) for b in watcher.builds]
        result["build_s"] = watcher.seconds
    return result


def _setup(job: Job) -> tuple[Problem, Any]:
    folder = build_folder(
        Path(job.cache_dir), job.problem, Path(job.solution), job.arch, job.content_hash
    )
    prepare_environment(folder, job.arch)
    print(f"build folder: {folder}", flush=True)
    import torch

    # Full float32 precision for the reference: TF32 convolutions would make it less exact than
    # the kernels it judges.
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        problem = load_problem(job.problem, Path(job.reference))
    except UserError as err:
        raise Verdict(status.PROBLEM_ERROR, str(err)) from err
    device = torch.device(job.device)
    if device.type == "cuda":
        device = torch.device("cuda", device.index or 0)  # set_device needs an index
        torch.cuda.set_device(device)
    return problem, device


def _cuda_unavailable() -> str | None:
    """Why CUDA code cannot be compiled here, or None when it can."""
    import torch

    if torch.version.cuda is None:
        return "this torch was built without CUDA"
    if find_cuda_home() is None:
        return "no CUDA toolkit found (set CUDA_HOME to the folder holding bin/nvcc)"
    return None


def _load_solution(job: Job, device: Any, watcher: BuildWatcher) -> type:
    on_cpu = device.type == "cpu"
    try:
        module = import_file(Path(job.solution))
    except NoCudaToolchain as err:
        detail = f"not compiled: {err}"
        raise Verdict(status.NO_GPU if on_cpu else status.COMPILE_ERROR, detail) from err
    except Exception as err:
        traceback.print_exc()
        if watcher.current is not None:
            raise Verdict(status.COMPILE_ERROR, watcher.failure(err)) from err
        if on_cpu and (watcher.uses_cuda or _needs_gpu(err)):
            raise Verdict(status.NO_GPU, f"not run: no CUDA device ({_describe(err)})") from err
        raise Verdict(status.LOAD_ERROR, f"importing it raised {_describe(err)}") from err
    model_new = getattr(module, "ModelNew", None)
    if not isinstance(model_new, type):
        raise Verdict(status.LOAD_ERROR, "the file defines no ModelNew class")
    if on_cpu and watcher.uses_cuda:
        built = ", ".join(f"{b.name} in {b.seconds or 0:.0f} s" for b in watcher.builds)
        raise Verdict(status.NO_GPU, f"compiled ({built}); not run: {_why_not_cuda()}")
    return model_new


def _why_not_cuda() -> str:
    import torch

    return "the device is cpu" if torch.cuda.is_available() else "no CUDA device"


def _device_for(requested: Any, watcher: BuildWatcher) -> Any:
    """Where to run: a solution whose extensions hold no CUDA code runs on the CPU, against
    the reference on the CPU; any other runs on the requested device."""
    import torch

    if watcher.builds and not watcher.uses_cuda:
        return torch.device("cpu")
    return requested


def _needs_gpu(err: BaseException) -> bool:
    text = str(err).lower()
    return any(s in text for s in ("cuda", "nvidia driver", "no gpu"))


def _check_cases(job: Job, problem: Problem, model_new: type, device: Any) -> int:
    """Check every case `job.trials` times; return the number of checks made."""
    checks = 0
    for index, case in enumerate(problem.cases):
        model_seed = job.seed + CASE_SEED_STRIDE * index
        reference, solution = _build_models(problem, model_new, case, model_seed, device)
        for trial in range(1, job.trials + 1):
            seed = model_seed + trial
            verdict = _check_once(job, problem, case, reference, solution, seed, device)
            if verdict:
                raise Verdict(status.INCORRECT, f"case {case.name!r}, seed {seed}: {verdict}")
            checks += 1
    return checks


def _time_benchmarks(
    job: Job, problem: Problem, model_new: type, device: Any
) -> list[dict[str, Any]]:
    from harness import timing
    from harness.inputs import make_inputs

    flush = timing.flush_buffer(device) if device.type == "cuda" else None
    rows = []
    for index, bench in enumerate(problem.benchmarks):
        seed = job.seed + BENCHMARK_SEED_OFFSET + index
        reference, solution = _build_models(problem, model_new, bench, seed, device)
        verdict = _check_once(job, problem, bench, reference, solution, seed, device)
        if verdict:
            raise Verdict(status.INCORRECT, f"benchmark {bench.name!r}: {verdict}")
        inputs = _guard(status.PROBLEM_ERROR, "get_inputs", make_inputs, bench, seed, device)
        measured = {}
        for role, model in (("reference", reference), ("solution", solution)):
            failure = status.PROBLEM_ERROR if role == "reference" else status.RUNTIME_ERROR
            timed = _guard(failure, f"timing {role}", _measure, model, inputs, job, flush)
            measured[role] = timed.to_dict()
        rows.append({"name": bench.name, "inputs": _describe_inputs(inputs), **measured})
    return rows


def _measure(model: Any, inputs: list[Any], job: Job, flush: Any) -> Any:
    import torch

    from harness import timing

    def call() -> object:
        return model(*inputs)

    with torch.no_grad():
        if flush is None:
            return timing.time_wall(call, warmup=job.warmup, reps=job.reps)
        return timing.time_cuda(call, warmup=job.warmup, reps=job.reps, flush=flush)


def _build_models(
    problem: Problem, model_new: type, case: Case, seed: int, device: Any
) -> tuple[Any, Any]:
    """Model and ModelNew from the same seed, with the reference's matching weights copied."""
    from harness.inputs import make_init_inputs, seed_everything

    def build(cls: type, failure: str, label: str) -> Any:
        seed_everything(seed)  # before get_init_inputs too: it may draw weights at random
        args = _guard(
            status.PROBLEM_ERROR, "get_init_inputs", lambda: make_init_inputs(case, device)
        )
        return _guard(failure, f"{label}(*init_inputs)", lambda: cls(*args).to(device).eval())

    reference = build(problem.model, status.PROBLEM_ERROR, "Model")
    solution = build(model_new, status.LOAD_ERROR, "ModelNew")
    wanted = solution.state_dict()
    shared = {
        key: value
        for key, value in reference.state_dict().items()
        if key in wanted and wanted[key].shape == value.shape
    }
    solution.load_state_dict(shared, strict=False)
    return reference, solution


def _check_once(
    job: Job, problem: Problem, case: Case, reference: Any, solution: Any, seed: int, device: Any
) -> str | None:
    import torch

    from harness.compare import compare
    from harness.inputs import make_inputs

    inputs = _guard(status.PROBLEM_ERROR, "get_inputs", lambda: make_inputs(case, seed, device))
    with torch.no_grad():
        expected = _guard(
            status.PROBLEM_ERROR, f"case {case.name!r}: Model", lambda: _call(reference, inputs)
        )
        actual = _guard(
            status.RUNTIME_ERROR, f"case {case.name!r}", lambda: _call(solution, inputs)
        )
    atol = _first_set(job.atol, case.atol, problem.atol)
    rtol = _first_set(job.rtol, case.rtol, problem.rtol)
    return compare(expected, actual, atol, rtol)


def _call(model: Any, inputs: list[Any]) -> Any:
    """Run the model on private copies of the inputs and wait for the device to finish."""
    import torch

    from harness.inputs import replicate_all

    if not inputs:
        output = model()
    else:
        device = next((x.device for x in inputs if isinstance(x, torch.Tensor)), None)
        output = model(*replicate_all(inputs, device or torch.device("cpu")))
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()  # an asynchronous CUDA error surfaces here, charged to the call
    return output


def _first_set(*values: float | None) -> float | None:
    return next((v for v in values if v is not None), None)


def _guard(failure: str, label: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Call `fn(*args)`; an exception becomes Verdict(failure, 'label: Error: message')."""
    try:
        return fn(*args)
    except Verdict:
        raise
    except Exception as err:
        traceback.print_exc()
        raise Verdict(failure, f"{label}: {_describe(err)}") from err


def _describe(err: BaseException) -> str:
    lines = [line for line in str(err).strip().splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[0] if lines else '(no message)'}"


def _describe_inputs(inputs: list[Any]) -> list[str]:
    import torch

    described = []
    for value in inputs:
        if isinstance(value, torch.Tensor):
            shape = ",".join(str(d) for d in value.shape)
            described.append(f"{str(value.dtype).removeprefix('torch.')}[{shape}]")
        else:
            described.append(repr(value))
    return described
