"""Nothing of the harness's outlives a run: a terminated run.py ends every process it started,
a precompiled header's compile dies with whatever started it, and the GPU tests' script stops
at once, in one line, on a machine without a GPU."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from harness.measure import pch
from tests.conftest import REPO, TOY, toy_solution

WAIT_S = 60.0


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead and not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def waited_for(path: Path, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + WAIT_S
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def gone(pid: int) -> bool:
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not alive(pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc and prctl")
def test_a_terminated_run_ends_every_process_it_started(tmp_path: Path) -> None:
    told = tmp_path / "left.pid"
    command = [sys.executable, "run.py", "--problem", str(TOY), "--device", "cpu"]
    command += ["--solution", toy_solution("leaves_a_process"), "--sandbox", "off"]
    command += ["--results-dir", str(tmp_path / "results"), "--log-dir", str(tmp_path / "logs")]
    env = {**os.environ, "LEFT_PROCESS_FILE": str(told)}
    run = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    left = None
    try:
        waited_for(told, run)
        left = int(told.read_text())
        assert alive(left)
        run.send_signal(signal.SIGTERM)
        out = run.communicate(timeout=WAIT_S)[0]
        assert run.returncode == 130, out  # as for Ctrl-C: what was recorded is kept
        assert gone(left), "the solution's process outlived the run"
    finally:
        if run.poll() is None:
            run.kill()
        if left is not None and alive(left):
            os.kill(left, signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs prctl")
def test_a_header_compile_dies_with_what_started_it_and_leaves_no_partial_header(
    tmp_path: Path,
) -> None:
    gch = tmp_path / "key" / "torch" / "extension.h.gch"
    compiler = tmp_path / "compiler.pid"  # a stand-in compiler: says its pid, then sleeps
    stand_in = f"import os, time; open({str(compiler)!r}, 'w').write(str(os.getpid())); "
    stand_in += "open(__import__('sys').argv[-1], 'w'); time.sleep(600)"
    parent = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, {pch.__file__!r}, {str(gch)!r}, sys.executable, "
        f"'-c', {stand_in!r}])\n"
        "time.sleep(600)\n"
    )
    starter = subprocess.Popen([sys.executable, "-c", parent])
    pid = None
    try:
        waited_for(compiler, starter)
        pid = int(compiler.read_text())
        assert alive(pid) and list(gch.parent.glob("extension.h.gch.*"))  # a partial header
        starter.kill()  # SIGKILL: nothing of its own runs
        starter.wait()
        assert gone(pid), "the header's compile outlived what started it"
        deadline = time.monotonic() + 10  # the step removes its partial header as it ends
        while list(gch.parent.glob("extension.h.gch*")) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not gch.exists() and not list(gch.parent.glob("extension.h.gch*"))
    finally:
        if starter.poll() is None:
            starter.kill()
        if pid is not None and alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks what it says without a GPU")
def test_the_gpu_tests_stop_at_once_in_one_line_without_a_gpu() -> None:
    started = time.monotonic()
    done = subprocess.run(
        ["bash", "scripts/gpu_tests.sh"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("gpu tests: no GPU here (") and "run this on a machine" in line
    assert time.monotonic() - started < 30  # no build, no test ran
