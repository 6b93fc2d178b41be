"""The worker's verdicts, run in this process (no spawn, no real build)."""

import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils import cpp_extension

from harness.job import Event, Job, Judged, Phase
from harness.measure import worker
from harness.settings import Checking, Places, Settings, StopRule, Timing
from tests.conftest import TOY, toy_solution


@pytest.fixture
def run_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # The worker sets these and wraps torch's builders for its process: undo that afterwards.
    for name in ("TORCH_EXTENSIONS_DIR", "TORCH_CUDA_ARCH_LIST", "CUDA_HOME", "PATH"):
        monkeypatch.setenv(name, os.environ.get(name, ""))
    for name in ("load_inline", "load"):
        monkeypatch.setattr(cpp_extension, name, getattr(cpp_extension, name))

    def run(solution: str, **changes) -> tuple[Judged, list[Event]]:
        job = Job(
            problem="toy",
            reference=str(TOY / "reference.py"),
            solution=toy_solution(solution),
            log_path=str(tmp_path / "log"),
            content_hash="h",
            settings=Settings(
                device="cpu",
                arch="9.0",
                checking=Checking(trials=1, seed=0),
                timing=Timing(rule=StopRule(warmup_ms=0, min_samples=2, max_samples=2)),
                places=Places(build_dir=tmp_path / "b"),
            ),
        )
        events: list[Event] = []
        result = worker.run(job, events.append)
        return result, events

    return run


def test_cuda_solution_without_a_toolkit_is_no_gpu_not_a_failure(run_job, monkeypatch) -> None:
    monkeypatch.setattr(worker, "_cuda_unavailable", lambda: "no CUDA toolkit found (test)")
    result, _ = run_job("cuda_kernel")
    assert result.status == "no_gpu"
    assert result.detail == "not compiled: no CUDA toolkit found (test)"


def test_phases_are_announced_in_order(run_job) -> None:
    result, events = run_job("good")
    assert result.status == "ok"
    assert [e for e in events if isinstance(e, Phase)] == [
        Phase(p) for p in ("load", "check", "time")
    ]


@pytest.mark.parametrize(
    ("profile", "tf32_convolutions"), [("harness", False), ("kernelbench", True)]
)
def test_tf32_convolutions_follow_the_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, profile: str, tf32_convolutions: bool
) -> None:
    # KernelBench's evaluator keeps PyTorch's defaults, so its profile's reference does too.
    before = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = not tf32_convolutions
    torch.backends.cuda.matmul.allow_tf32 = True
    checking = Checking(profile=profile)
    settings = Settings(device="cpu", places=Places(build_dir=tmp_path), checking=checking)
    job = Job("toy", str(TOY / "reference.py"), toy_solution("good"), "", "h", settings)
    monkeypatch.setattr(worker, "_use_build_cache", lambda job: tmp_path)
    try:
        worker.setup(job)
        assert torch.backends.cudnn.allow_tf32 is tf32_convolutions
        assert torch.backends.cuda.matmul.allow_tf32 is False
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before


def test_a_solution_that_raises_at_import_is_a_load_error(run_job, tmp_path: Path) -> None:
    result, _ = run_job("raises_at_import")
    assert result.status == "load_error"
    assert result.detail == "importing it raised ImportError: no module for this"


def test_a_wrong_constructor_is_a_load_error(run_job) -> None:
    result, _ = run_job("wrong_constructor")
    assert result.status == "load_error"
    assert result.detail.startswith("ModelNew(*init_inputs): TypeError:")


def test_a_model_new_that_is_not_a_class_is_a_load_error(run_job) -> None:
    result, _ = run_job("model_new_not_a_class")
    assert (result.status, result.detail) == ("load_error", "the file defines no ModelNew class")


def test_a_wrong_output_type_is_incorrect(run_job) -> None:
    result, _ = run_job("returns_list")
    assert result.status == "incorrect"
    assert "output: expected a Tensor, got list" in result.detail


def test_the_shares_of_device_time_reach_the_result_and_stay_on_a_rejection(
    run_job, monkeypatch
) -> None:
    """Synthetic profiles (a CPU has no kernels): the solution's own kernel and the
    reference's, then the reference's one; the shares are in the result whatever the verdict."""
    from harness.measure import anticheat, profiling

    theirs = profiling.Kernel("void at::native::mul_kernel(float*)", 3.0)
    mine = profiling.Kernel("void not_named_in_the_source(float*)", 1.0)
    solution = profiling.Profile(frozenset(), (mine, theirs))
    reference = profiling.Profile(frozenset(), (theirs,))
    profiles = iter([None, solution])  # the warm-up, the solution (profiled first)
    monkeypatch.setattr(profiling, "profile", lambda call, device: next(profiles, reference))
    result, _ = run_job("good")
    assert result.status == "ok"
    assert (result.own_share, result.reference_share) == (0.0, 0.75)

    def reject(*args) -> list[str]:
        raise anticheat.reject("fig_leaf", "test")

    profiles = iter([None, solution])
    monkeypatch.setattr(profiling, "judge", reject)
    result, _ = run_job("good")
    assert (result.status, result.reason) == ("rejected", "fig_leaf")
    assert result.reference_share == 0.75 and result.benchmarks == ()


def test_a_profile_drops_only_the_profilers_known_noise(capfd) -> None:
    """kineto writes KNOWN_NOISE to fd 2 (not sys.stderr): at its first trace on a machine
    without a driver, and (torch 2.14) at each trace's start and end; torch 2.11 warns that a
    second trace clears the first's events. Whatever else is written meanwhile still shows."""
    import warnings

    import torch

    from harness.measure import profiling

    def noisy() -> None:
        os.write(2, b"ERROR: DeviceProperties.cpp:56] gpuGetDeviceCount failed with code 35\n")
        os.write(
            2, b"USDT:2026-12-01 19751:19751 SyncActivityProfilerHandler.cpp:39] profiler_start\n"
        )
        os.write(2, b"something else\n")
        warnings.warn(profiling.CYCLE_WARNING + ". Only events ...", UserWarning, stacklevel=1)
        warnings.warn("a warning of the solution's own", UserWarning, stacklevel=1)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        profiling.profile(noisy, torch.device("cpu"))
    err = capfd.readouterr().err
    assert "gpuGetDeviceCount" not in err and "USDT" not in err and "something else\n" in err
    assert [str(w.message) for w in caught] == ["a warning of the solution's own"]


def test_a_profile_ends_with_cupti_torn_down(monkeypatch) -> None:
    """The profiler's library reads TEARDOWN_CUPTI when a profile ends; unless it is "1", CUPTI
    stays attached and slows every later launch (harness.measure.profiling's doc: a 4.6 us
    kernel timed at 28.7 us on the H200). A caller's "0" does not survive a profile."""
    import torch

    from harness.measure import profiling

    monkeypatch.setenv(profiling.TEARDOWN, "0")
    seen = []
    profiling.profile(lambda: seen.append(os.environ[profiling.TEARDOWN]), torch.device("cpu"))
    assert seen == ["1"] and os.environ[profiling.TEARDOWN] == "1"


def _tracker_after_letting_go(conn: Any) -> None:
    from multiprocessing import resource_tracker

    inherited = resource_tracker._resource_tracker._fd
    worker.own_resource_tracker()
    try:
        os.fstat(inherited)
        still_open = True
    except OSError:
        still_open = False
    conn.send((inherited, still_open, resource_tracker._resource_tracker._fd))


def test_a_worker_lets_go_of_the_parents_resource_tracker() -> None:
    # A spawned process inherits the write end of the parent's tracker pipe: a solution could
    # write to it, and a worker's leaked semaphores were warned about on the run's terminal.
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()  # the parent's, as a run that spawned workers has one
    context = multiprocessing.get_context("spawn")
    receiving, sending = context.Pipe(duplex=False)
    child = context.Process(target=_tracker_after_letting_go, args=(sending,))
    child.start()
    inherited, still_open, now = receiving.recv()
    child.join(timeout=60)
    assert inherited is not None and not still_open and now is None
