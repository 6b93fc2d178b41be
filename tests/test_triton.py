"""Triton solutions: found, `no_gpu` with a clear line where there is no GPU, each compile
framed as a build, a compile error pointing at the solution's line, the cache kept with the
solution's builds, and the shipped Triton solutions right on every case (run by Triton's
interpreter on the CPU)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness import verdicts
from harness.job import BuildEnd, BuildStart
from harness.loading import import_file
from harness.measure import triton_builds
from harness.measure.builds import Build
from harness.toolchain import prepare_environment
from harness.verdicts import Verdict
from tests.conftest import REPO, TOY, CliRun, toy_solution

SHIPPED = [
    ("softmax", "solutions/softmax/triton_online.py"),
    ("smooth_l1", "solutions/smooth_l1/triton_blocks.py"),
]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU's verdict")
def test_a_triton_solution_is_no_gpu_on_the_cpu_with_one_clear_line(cli: CliRun) -> None:
    assert cli("--problem", str(TOY), "--solution", toy_solution("triton_kernel")) == 0
    record = cli.record("triton_kernel")
    assert record["status"] == "no_gpu"
    assert record["detail"] == (
        "Triton kernels (scale_add_kernel) need a CUDA GPU; not run: no CUDA device"
    )


def test_the_kernels_of_a_module_are_found() -> None:
    module = import_file(toy_solution("triton_kernel"))
    assert triton_builds.kernels_of(module) == ["scale_add_kernel"]
    assert triton_builds.kernels_of(import_file(toy_solution("good"))) == []


def test_each_compile_is_a_build_and_a_cache_hit_says_so() -> None:
    # Triton's hooks call these around each compile (triton.knobs.runtime, .compilation).
    heard: list[object] = []
    builds: list[Build] = []
    watcher = triton_builds.TritonWatcher(heard.append, builds)
    kernel = import_file(toy_solution("triton_kernel")).scale_add_kernel
    info = type("Info", (), {"jit_function": kernel})()
    assert watcher._before(fn=info, key=(), repr="") is False  # False: Triton compiles it
    watcher._heard(cache_hit=False, src=None, metadata={}, metadata_group={}, times=None)
    watcher._after(fn=info, key=())
    watcher._before(fn=info, key=(), repr="")
    watcher._heard(cache_hit=True, src=None, metadata={}, metadata_group={}, times=None)
    watcher._after(fn=info, key=())
    assert heard[0] == BuildStart("triton scale_add_kernel", cuda=True)
    ends = [event for event in heard if isinstance(event, BuildEnd)]
    assert [end.cached for end in ends] == [False, True]
    assert [(b.name, b.cuda, b.cached) for b in builds] == [
        ("triton scale_add_kernel", True, False),
        ("triton scale_add_kernel", True, True),
    ]


def test_a_compile_while_timing_is_not_announced_but_warned_of() -> None:
    # During a timing the parent reads only the timing's answers from the worker (the directed
    # rounds): a BuildStart there would be out of turn. New inputs there may still compile.
    from harness.stats import part

    heard: list[object] = []
    watcher = triton_builds.TritonWatcher(heard.append, [])
    info = type(
        "Info", (), {"jit_function": import_file(toy_solution("triton_kernel")).scale_add_kernel}
    )()
    assert watcher.warnings() == []
    with part("timing"):
        watcher._before(fn=info)
        watcher._heard(cache_hit=False)
        watcher._after()
    assert heard == [] and len(watcher.builds) == 1
    (warned,) = watcher.warnings()
    assert warned.startswith("Triton compiled scale_add_kernel while timing")


def test_a_failed_compile_is_a_compile_error_at_the_solutions_line() -> None:
    # Triton's front end (Python to its IR) runs without a GPU: its error is a real one.
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    path = Path(toy_solution("triton_compile_error"))
    kernel = import_file(path).broken_kernel
    source = ASTSource(kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}, {"BLOCK": 256})
    with pytest.raises(Exception) as raised:
        import triton

        triton.compile(source, target=GPUTarget("cuda", 90, 32))
    heard: list[object] = []
    watcher = triton_builds.TritonWatcher(heard.append, [])
    watcher._before(fn=type("Info", (), {"jit_function": kernel})())
    checked = Verdict(verdicts.RUNTIME_ERROR, "ModelNew: CompilationError: at 4:8:")
    checked.__cause__ = raised.value
    verdict = watcher.failure(checked, path)
    assert verdict.status == verdicts.COMPILE_ERROR
    assert verdict.detail.startswith(
        "Triton kernel broken_kernel failed to compile at line 15 of triton_compile_error.py: "
    )
    assert "no_such_function" in verdict.detail
    assert isinstance(heard[-1], BuildEnd)  # the build the parent saw begin ends
    older = type("OlderTriton", (), {"fn": kernel.fn, "__name__": "broken_kernel"})()
    assert triton_builds.describe(raised.value, older, path) == verdict.detail  # no def line kept
    other = Verdict(verdicts.INCORRECT, "differs")
    assert watcher.failure(other, path) is other  # no compile under way: as it was


def test_triton_caches_in_the_solutions_build_folder(tmp_path: Path, monkeypatch) -> None:
    for name in ("TORCH_EXTENSIONS_DIR", "TORCH_CUDA_ARCH_LIST", "TRITON_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    prepare_environment(tmp_path / "build-abc", "9.0")
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "build-abc" / "triton")


@pytest.mark.parametrize(("problem", "solution"), SHIPPED)
def test_the_shipped_triton_solutions_pass_every_case_interpreted(problem, solution) -> None:
    done = _interpreted(problem, solution)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert int(done.stdout.split("checks: ")[1]) >= 20


def test_the_interpreted_check_can_fail() -> None:
    broken = REPO / "tests" / "fixtures" / "toy_solutions" / "wrong_scale.py"
    done = _interpreted(str(TOY / "reference.py"), str(broken))
    assert done.returncode == 1 and done.stdout.startswith("incorrect:")


def _interpreted(problem: str, solution: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tests.triton_interpreted", problem, solution]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
