"""Build, check and time one solution; runs inside a process spawned by isolate.py.

Steps, each announced to the parent over a pipe (`phase` messages), the last message being
the result (`result`). Everything printed, by the harness, the compiler or the solution, goes
to the job's log file, never into the pipe.

  load   import the solution (its extensions build here) and find ModelNew
  check  every correctness case of the problem (or the one `case` names), `trials` times
         each with fresh inputs, under the rules of harness.measure.anticheat; each case's name is
         told to the parent as it starts (a `case` message), so a failure can be replayed
  time   every benchmark of the problem (its name told as a case's is): check once more, then
         time reference and solution side by side (harness.measure.benchmarking); then profile one
         call of each (harness.measure.profiling: a GPU solution must launch kernels of its own, and
         not as a fig leaf beside the reference's; the shares of its device time are in the
         result). Skipped with `check_only`.

The clocks, timers and comparisons the harness uses are recorded before the solution is
imported and verified after each step (harness.measure.anticheat.Snapshot).

A job whose task is one of REFERENCE_TASKS loads no solution: the audit of references, the
GPU's copy-bandwidth ceiling, or the reference timed eager and under torch.compile side by side
for the session's baseline cache. The parent runs these here so that it never touches the GPU.

A spare worker's side (harness.run.isolate.Spare): a worker started before its job.

It imports what every job imports (torch, the harness, the extension builder, the profiler's
Python side) while the slot's current jobs run, touching no device, and says so (`Imported`).
Told to warm up, it starts CUDA on its device and the profiler once (what every job's load step
does first); the slot asks that only of the next job's spare, only while its current job is not
timing, and holds that job's time step until the spare is warm (the `gate` of
`main`). Then it waits for its job and runs it as a fresh worker would.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import multiprocessing
import os
import signal
import sys
import traceback
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch  # importing torch does not import its extension builder: that waits for setup

from harness import codec, sandbox, toolchain, verdicts
from harness.job import (
    REFERENCE_TASKS,
    Count,
    Done,
    Event,
    Imported,
    Job,
    Judged,
    OnCase,
    Phase,
    ReadyToTime,
    Warm,
    Warmed,
    failure,
    harness_failure,
)
from harness.loading import Problem, Seeds, import_file, load_problem, reference_namespace
from harness.measure import (
    anticheat,
    audit,
    directed,
    hardware,
    kernelbench,
    profiling,
    triton_builds,
)
from harness.measure.benchmarking import time_benchmarks
from harness.measure.builds import (
    BuildWatcher,
    NoCudaToolchain,
    remember_failure,
    remembered_failure,
)
from harness.measure.checking import check_cases, describe_error
from harness.measure.compiled import compile_baseline
from harness.settings import KERNELBENCH, Settings
from harness.stats import PARTS, part
from harness.toolchain import find_cuda_home, prepare_environment, use_build_cache
from harness.verdicts import HarnessError, UserError, Verdict

Send = Callable[[Event], None]
STARTED_AHEAD = False  # set in a spare worker (`waiting`), said in its log


def entry(job: Job, conn: Any, gate: Any = None) -> None:
    """The worker's entry point: ignore Ctrl-C, the parent's to handle (this drops one pressed
    while the worker started), then unblock it, so the build tools it starts get the usual
    mask (ninja stops a build on Ctrl-C). `gate`: see `main`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if job.task == "build":  # before CUDA starts: a build job never holds a GPU
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    die_with_parent()
    own_resource_tracker()
    sandbox.install()  # in the sandbox: name the rules the job's attempts meet
    main(job, conn, gate)


PR_SET_PDEATHSIG = 1  # from <sys/prctl.h>


def own_resource_tracker() -> None:
    """Let go of the parent's multiprocessing resource tracker, whose pipe a spawned process
    inherits: a solution cannot write to it, and what the worker leaves registered (Inductor's
    semaphores under --compile) is cleaned up, and warned about, by a tracker of its own,
    into its log instead of the run's terminal. The tracker starts again when first used."""
    from multiprocessing import resource_tracker

    tracker = resource_tracker._resource_tracker
    inherited = getattr(tracker, "_fd", None)
    if inherited is None:
        return
    with contextlib.suppress(OSError):
        os.close(inherited)
    tracker._fd = None  # type: ignore[attr-defined]  # its state, which typeshed leaves out
    tracker._pid = None  # type: ignore[attr-defined]


def die_with_parent() -> None:
    """On Linux, have the kernel kill this worker when the harness dies, even of SIGKILL,
    so no hanging solution outlives it holding a GPU. Elsewhere, nothing."""
    parent = multiprocessing.parent_process()
    if not sys.platform.startswith("linux") or parent is None:
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent.pid:  # the harness died before the request took effect
        os._exit(1)


def main(job: Job, conn: Any, gate: Any = None) -> None:
    """Process entry point: run the job, send its result, exit. With a `gate` (a pipe from the
    parent), the time step waits for the parent's word that no other process is starting on
    its device (harness.run.pool's spare workers warm up before, never during, a timing)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle

    def send(event: Event) -> None:
        if gate is not None and event == Phase("time"):
            conn.send(ReadyToTime())
            with contextlib.suppress(EOFError, OSError):  # a parent gone: PDEATHSIG ends this
                gate.recv()
        conn.send(event)

    try:
        log = _redirect_output(job.log_path)
    except OSError as err:  # the harness's folder, not the solution: no verdict on it
        why = err.strerror or str(err)
        send(Done(harness_failure(f"cannot write the worker's log {job.log_path}: {why}")))
        conn.close()
        return
    faulthandler.enable(log)
    print(f"job: {asdict(job)}", flush=True)
    if STARTED_AHEAD:
        print("worker: started ahead of its job, as a spare", flush=True)
    PARTS.taken()  # a spare worker's warm-up is not the job's
    if job.directed and gate is not None and job.task == "solution":
        directed.LINK = directed.Link(conn.send, gate.recv)
        directed.EVIDENCE = directed.Evidence(Path(job.evidence))
    judged = build_only(job, send) if job.task == "build" else run(job, send)
    judged = replace(judged, parts_s=PARTS.taken() or None)
    print(f"result: {judged.status}: {judged.detail}", flush=True)
    if judged.parts_s:
        print(f"parts (s): {judged.parts_s}", flush=True)
    send(Done(judged))
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


def run(job: Job, send: Send) -> Judged:
    """Run the job's steps; any failure becomes a status and a one-line detail."""
    result: dict[str, Any] = {"status": verdicts.OK}  # Judged's fields, as they are found
    watcher: BuildWatcher | None = None
    started = False  # whether any of the solution's code has run
    try:
        send(Phase("load"))
        problem, device = setup(job)
        if job.task in REFERENCE_TASKS:
            return reference_task(job, problem, device, send)
        watcher = _watcher(job, device, send)
        watcher.install()
        if not job.settings.checking.check_only:  # else no profile runs (2.4 s on a CPU)
            profiling.warm_up(device)  # before the snapshot: it rebinds some of torch's names
        snapshot = anticheat.Snapshot()
        started = True
        model_new = _load_solution(job, device, watcher)
        snapshot.verify("when the solution was imported")
        device = _device_for(device, watcher)
        result["device"] = str(device)
        if directed.EVIDENCE is not None:
            directed.EVIDENCE.device = str(device)
        send(Phase("check"))
        checking, told = job.settings.checking, _teller(send)
        counted = lambda done, total: send(Count(done, total))  # noqa: E731
        result["checks"] = check_cases(problem, model_new, device, checking, told, counted)
        snapshot.verify("during the checks")
        if checking.check_only:
            result["detail"] = "checked only, not timed (--check-only)"
        else:
            send(Phase("time"))
            result["benchmarks"] = tuple(
                time_benchmarks(problem, model_new, device, job.settings, told, counted)
            )
            snapshot.verify("during the timing")
            path, built = Path(job.solution), bool(watcher.builds)
            seeds = Seeds.of(job.settings.checking)
            with part("profile"):
                own = profiling.own_work(problem, model_new, device, seeds, path, built)
            result.update(own_share=own.shares.own, reference_share=own.shares.reference)
            triton = watcher.triton.warnings() if watcher.triton else []
            result["warnings"] = (*own.warnings, *triton)
            if own.rejection is not None:
                raise own.rejection
    except Verdict as raised:  # a row without timings: they mean nothing for a failed solution
        triton = watcher.triton if watcher is not None else None
        verdict = triton.failure(raised, Path(job.solution)) if triton else raised
        detail = verdict.detail
        if verdict.status == verdicts.REJECTED and job.settings.checking.profile == KERNELBENCH:
            detail += kernelbench.DEFENCE_NOTE
        result.update(status=verdict.status, detail=detail, reason=verdict.reason, benchmarks=())
    except BaseException as err:  # escaped every guard: the solution's doing, or the harness's
        escaped = _escaped(err, Path(job.solution), started)
        result.update(status=escaped.status, detail=escaped.detail, benchmarks=())
        result["harness_error"] = escaped.harness_error
    return Judged(**result, **_builds(watcher)) if watcher is not None else Judged(**result)


def reference_task(job: Job, problem: Problem, device: torch.device, send: Send) -> Judged:
    """The jobs that run no solution, so that the parent never touches the GPU: the audit of
    the job's problems ("audits", by problem: harness.measure.audit.audit_each), the
    copy-bandwidth ceiling ("ceiling") and the torch.compile baseline ("compile_rows")."""
    if job.task == "audit":
        send(Phase("check"))
        sources = job.sources or ((job.problem, job.reference),)
        return Judged(
            verdicts.OK, audits=audit.audit_each(sources, device, job.settings.checking.tolerance)
        )
    send(Phase("time"))
    if job.task == "ceiling":
        return Judged(verdicts.OK, ceiling=hardware.measure_copy(device))
    with part("baseline"):
        rows, untimed = compile_baseline(problem, device, job.settings, send)
    return Judged(verdicts.OK, compile_rows=tuple(rows), compile_untimed=untimed)


def build_only(job: Job, send: Send) -> Judged:
    """The load step alone, in a worker that sees no GPU: build the solution's extensions into
    its folder of the build cache, then stop. `ok` means its judge will find them built. A
    compile error is final, and so is any verdict on a CPU run (a CUDA solution's `no_gpu`);
    on a GPU run, another failure to import may be the hidden GPU's doing, and its judge
    imports it again (harness.run.scheduler)."""
    result: dict[str, Any] = {"status": verdicts.OK}  # Judged's fields, as they are found
    settings = job.settings
    send(Phase("load"))
    device = torch.device(settings.device)
    watcher = _watcher(job, device, send)
    started = False  # whether any of the solution's code has run
    try:
        _use_build_cache(job)
        watcher.install()
        started = True
        _load_solution(job, device, watcher)
    except Verdict as verdict:
        result.update(status=verdict.status, detail=verdict.detail, reason=verdict.reason)
    except BaseException as err:
        escaped = _escaped(err, Path(job.solution), started)
        result.update(status=escaped.status, detail=escaped.detail)
        result["harness_error"] = escaped.harness_error
    return Judged(**result, **_builds(watcher))


def _watcher(job: Job, device: torch.device, send: Send) -> BuildWatcher:
    """The watcher of the job's builds, which skips CUDA builds where none can be compiled or
    run here (run.py's --compile-cuda asks for them anyway)."""
    skip = _cuda_unavailable() or cuda_not_asked(device, job.settings)
    return BuildWatcher(send, skip, Path(job.log_path), job.settings.places.build_dir)


def _builds(watcher: BuildWatcher) -> dict[str, Any]:
    """Judged's fields of the builds `watcher` saw."""
    builds = tuple(watcher.builds)
    return {"builds": builds, "build_s": watcher.seconds}


def _teller(send: Send) -> Callable[[str], None]:
    """Tells the parent the name of each case or benchmark as it starts (OnCase),
    so a failure, a crash too, can be replayed on that case alone."""
    return lambda name: send(OnCase(name))


def _escaped(err: BaseException, solution: Path, started: bool) -> Judged:
    """The verdict on an exception that escaped every guard, its traceback logged."""
    traceback.print_exc()
    if isinstance(err, SystemExit):
        return failure(verdicts.CRASHED, f"the solution called sys.exit({err.code})")
    return _blame(err, solution, started)


def _blame(err: BaseException, solution: Path, started: bool) -> Judged:
    """The verdict on an exception that escaped every guard: the solution's runtime error
    where its code had run and the exception is of its making (`_solution_caused`), else a
    harness failure."""
    if isinstance(err, HarnessError):  # the harness's own machinery said it failed
        return harness_failure(str(err))
    if started and _solution_caused(err, solution):
        return failure(verdicts.RUNTIME_ERROR, describe_error(err))
    return harness_failure(describe_error(err))


def _solution_caused(err: BaseException, solution: Path) -> bool:
    """Whether the solution made `err`: raised in its file; of a kind no harness code raises
    (KeyboardInterrupt, a BaseException of its own); exhausted memory; or a CUDA error it left
    behind, which surfaces at the next call that waits for the device, the harness's too."""
    mine = os.path.realpath(solution)
    if any(os.path.realpath(f.filename) == mine for f in traceback.extract_tb(err.__traceback__)):
        return True
    if not isinstance(err, Exception) or isinstance(err, MemoryError):
        return True
    return isinstance(err, RuntimeError) and "CUDA" in str(err)


def setup(job: Job) -> tuple[Problem, torch.device]:
    """The job's build folder, full float32 precision, its problem (at --precision) and its
    device: what any process that runs the job's solution sets first (the worker,
    harness.measure.witness)."""
    settings = job.settings
    print(f"build folder: {_use_build_cache(job)}", flush=True)
    # Full float32 for the reference (TF32 convolutions would make it less exact than the kernels
    # it judges); KernelBench's profile keeps PyTorch's defaults, as its evaluator does.
    torch.backends.cudnn.allow_tf32 = settings.checking.profile == KERNELBENCH
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        problem = load_problem(job.problem, Path(job.reference), settings.checking.precision)
    except UserError as err:
        raise Verdict(verdicts.PROBLEM_ERROR, str(err)) from err
    device = torch.device(settings.device)
    if device.type == "cuda":
        device = torch.device("cuda", device.index or 0)  # set_device needs an index
        torch.cuda.set_device(device)
    return problem, device


def _use_build_cache(job: Job) -> Path:
    """Build the job's solution in its own folder of the build cache
    (harness.toolchain.use_build_cache)."""
    settings = job.settings
    if job.build_folder:
        prepare_environment(Path(job.build_folder), settings.arch)
        return Path(job.build_folder)
    return use_build_cache(
        settings.places.build_dir, job.problem, Path(job.solution), settings.arch
    )


def _cuda_unavailable() -> str | None:
    """Why CUDA code cannot be compiled here, or None when it can."""
    if torch.version.cuda is None:
        return "this torch was built without CUDA"
    if find_cuda_home() is None:
        return "no CUDA toolkit found (set CUDA_HOME to the folder holding bin/nvcc)"
    return None


def cuda_not_asked(device: torch.device, settings: Settings) -> str | None:
    """Why CUDA code is not compiled for a run on the CPU, unless --compile-cuda asks for it:
    it could not run there, and its compile takes most of a CPU machine's first run."""
    if device.type != "cpu" or settings.compile_cuda:
        return None
    where = "no CUDA device here" if not torch.cuda.is_available() else "the device is cpu"
    return f"{where}, so CUDA is not compiled (--compile-cuda compiles it anyway)"


def _load_solution(job: Job, device: torch.device, watcher: BuildWatcher) -> type:
    on_cpu = device.type == "cpu"
    namespace = reference_namespace(job.reference)  # what KernelBench's one namespace gives
    folder = Path(os.environ["TORCH_EXTENSIONS_DIR"])  # the solution's, keyed by its content
    remembered = remembered_failure(folder)
    if remembered is not None:  # no compile: it failed before, and would again
        raise Verdict(verdicts.COMPILE_ERROR, remembered)
    try:  # one build of a solution at a time, whichever processes ask (torch's own lock
        # comes after it writes the sources)
        with codec.locked(folder):
            module = import_file(Path(job.solution), namespace)
    except NoCudaToolchain as err:
        detail = f"not compiled: {err}"
        raise Verdict(verdicts.NO_GPU if on_cpu else verdicts.COMPILE_ERROR, detail) from err
    except Exception as err:
        traceback.print_exc()
        if watcher.current is not None:
            failed = watcher.failure(err, Path(job.solution))
            remember_failure(folder, failed)
            raise Verdict(verdicts.COMPILE_ERROR, failed) from err
        if on_cpu and (watcher.uses_cuda or _needs_gpu(err)):
            raise Verdict(
                verdicts.NO_GPU, f"not run: no CUDA device ({describe_error(err)})"
            ) from err
        raise Verdict(verdicts.LOAD_ERROR, f"importing it raised {describe_error(err)}") from err
    model_new = getattr(module, "ModelNew", None)
    if not isinstance(model_new, type):
        raise Verdict(verdicts.LOAD_ERROR, "the file defines no ModelNew class")
    why = "the device is cpu" if torch.cuda.is_available() else "no CUDA device"
    if on_cpu and watcher.uses_cuda:
        built = ", ".join(b.describe() for b in watcher.builds)
        raise Verdict(verdicts.NO_GPU, f"{built}; not run: {why}")
    kernels = triton_builds.kernels_of(module)
    if kernels and on_cpu:
        named = ", ".join(kernels)
        raise Verdict(verdicts.NO_GPU, f"Triton kernels ({named}) need a CUDA GPU; not run: {why}")
    if kernels:
        watcher.triton = triton_builds.TritonWatcher(watcher.notify, watcher.builds)
        watcher.triton.install()
    return model_new


def _device_for(requested: torch.device, watcher: BuildWatcher) -> torch.device:
    """Where to run: a solution whose extensions hold no CUDA code runs on the CPU, against
    the reference on the CPU; any other runs on the requested device."""
    if watcher.builds and not watcher.uses_cuda:
        return torch.device("cpu")
    return requested


# What torch says when code asks for a GPU that is not there.
NO_GPU_MESSAGES = (
    "found no nvidia driver",
    "no cuda gpus are available",
    "torch not compiled with cuda enabled",
    "cuda driver initialization failed",
)


def _needs_gpu(err: BaseException) -> bool:
    text = str(err).lower()
    return any(message in text for message in NO_GPU_MESSAGES)


def waiting(jobs: Any, conn: Any) -> None:
    """The spare's entry point: it says Imported on `conn` once its imports are done; messages
    on `jobs` are Warm, answered with Warmed on `conn`, then the Job; the same pipe is the
    job's gate. A parent that closes the pipe without a job ends it quietly."""
    global STARTED_AHEAD
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    die_with_parent()  # also while paused (SIGSTOP) by its slot during a timing
    own_resource_tracker()
    cuda_home = toolchain.find_cuda_home()  # as the job will set it; else torch warns here
    if cuda_home:
        os.environ["CUDA_HOME"] = cuda_home
    import torch.profiler
    import torch.utils.cpp_extension  # noqa: F401

    conn.send(Imported())
    while True:
        try:
            message = jobs.recv()
        except (EOFError, OSError):
            return
        if isinstance(message, Warm):
            conn.send(Warmed(warm(message.device)))
            continue
        STARTED_AHEAD = True
        entry(message, conn, jobs)
        return


def warm(device: str) -> str | None:
    """Start CUDA on `device` and the profiler once (on the host: profiling.warm_up); why it
    failed, or None."""
    import torch

    from harness.measure import profiling

    try:
        if device.startswith("cuda"):
            where = torch.device(device)
            torch.cuda.set_device(where)
            torch.zeros(1, device=where)
            torch.cuda.synchronize(where)
            profiling.warm_up(where)
    except Exception as err:  # the job will meet it again, and report it
        return f"{type(err).__name__}: {err}"
    return None
