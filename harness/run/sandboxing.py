"""A sandbox for the workers that build and judge solutions (`--sandbox auto|required|off`).

Each worker is started through harness/sandbox.py (the launcher), which gives it a network namespace
of its own, Landlock rules (the run's results, logs, build cache and the other solutions
unreadable; only its scratch folder and the device nodes writable; no ptrace or signal out of
it) and limits on memory, processes and open files, then execs the interpreter. The harness
copies into the scratch folder what the job may see and takes out what it made
(harness.run.staging); an audit hook in the worker names the rule an attempt met
(harness.measure.sandboxed). `missing` says what this machine lacks.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from multiprocessing import spawn
from pathlib import Path
from typing import Any

from harness import landlock
from harness.measure import pch
from harness.sandbox import POLICY_VARIABLE, SCRATCH_VARIABLE, Policy, hidden_paths

LAUNCH = Path(__file__).resolve().parent.parent / "sandbox.py"
CUDA_PROBE_S = 120.0  # how long the check that CUDA starts inside the sandbox may take
_STARTING = threading.Lock()  # the interpreter and the environment a start takes are global


def missing() -> list[str]:
    """What this machine lacks for the sandbox, a phrase each; empty when it has it all."""
    lacks = []
    if not sys.platform.startswith("linux"):
        return [f"Linux's namespaces and Landlock ({sys.platform} has neither)"]
    version = landlock.abi()
    if version < 4:
        lacks.append(f"Landlock ABI 4 or later (this kernel has {version or 'none'})")
    for command in (["unshare", "-n", "true"], ["unshare", "-rn", "true"]):
        try:
            if subprocess.run(command, capture_output=True, timeout=10).returncode == 0:
                break
        except (OSError, subprocess.TimeoutExpired):
            continue
    else:
        lacks.append("a network namespace (unshare -n, or -rn as this user, failed)")
    return lacks


class Sandbox:
    """The run's sandbox: its policy, and a root folder for the workers' scratch folders."""

    def __init__(self, policy: Policy, root: Path) -> None:
        self.policy = policy
        self.root = root
        self.links = root / "b"  # harness.run.staging's stable build names
        self.workers = root / "w" / str(os.getpid())  # this run's scratch folders
        self.launcher = root / "python"
        self._made = False  # the folders and the launcher, made by the first scratch()
        self._making = threading.Lock()

    def scratch(self) -> Path:
        """A new scratch folder for a worker (the first also makes the launcher)."""
        with self._making:  # the pool's threads stage their first jobs at once
            if not self._made:
                self.workers.mkdir(parents=True, exist_ok=True)
                fresh = self.root / f".python.{os.getpid()}"
                fresh.write_text(f"#!/bin/sh\nexec '{sys.executable}' '{LAUNCH}' \"$@\"\n")
                fresh.chmod(0o755)
                os.replace(fresh, self.launcher)  # atomic: another run may start through it
                self._made = True
        return Path(tempfile.mkdtemp(dir=self.workers))

    def variables(self, scratch: Path) -> dict[str, str]:
        """The environment the launcher reads: the run's policy and the worker's folder."""
        return {POLICY_VARIABLE: self.policy.to_env(), SCRATCH_VARIABLE: str(scratch)}

    def start(self, process: Any, scratch: Path) -> None:
        """Start `process` (a multiprocessing spawn) inside the sandbox, in `scratch`."""
        with _STARTING:
            before, variables = spawn.get_executable(), self.variables(scratch)
            os.environ.update(variables)
            spawn.set_executable(str(self.launcher))
            try:
                process.start()
            finally:
                spawn.set_executable(before)
                for name in variables:
                    del os.environ[name]

    def close(self) -> None:
        shutil.rmtree(self.workers, ignore_errors=True)

    def cuda_fails(self) -> str | None:
        """Why CUDA does not start inside the sandbox on this machine, or None when it does:
        tried once per launcher, torch and kernel (a marker in the root), in a sandboxed
        child (seconds, the first time)."""
        import torch

        stamp = hashlib.sha256(LAUNCH.read_bytes()).hexdigest()[:16]
        key = f"{torch.__version__}|{os.uname().release}|{stamp}"
        marker = self.root / "cuda-ok"
        if marker.exists() and marker.read_text() == key:
            return None
        scratch = self.scratch()
        env = {**os.environ, **self.variables(scratch)}
        code = "import torch; torch.zeros(1, device='cuda'); print('cuda ok')"
        try:
            done = subprocess.run(
                [str(self.launcher), "-c", code], env=env, capture_output=True, text=True,
                timeout=CUDA_PROBE_S,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"{type(err).__name__}: {err}"
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        if "cuda ok" in done.stdout:
            marker.write_text(key)
            return None
        lines = (done.stderr or done.stdout).strip().splitlines()
        return lines[-1][:200] if lines else f"exit {done.returncode}"


active: Sandbox | None = None  # the process's: made by begin or take, ended with its pool
_taken: dict[tuple[str, Policy, str, str], str | None] = {}  # take's answers, in this process


def begin(settings: Any, work: list[tuple[Any, list[Path]]]) -> Sandbox | None:
    """The run's sandbox on this host, as `settings.limits.sandbox` asks and this machine
    allows (made the active one); None when off, saying why in one line unless 'off' was
    asked. Raises UserError when 'required' and something is missing."""
    global active
    mode = settings.limits.sandbox
    if mode == "off":
        return None
    places = settings.places
    box, why = opened(mode, policy(settings, work), places.build_dir, settings.device)
    if why:
        print(f"sandbox: off, {why} (--sandbox off hides this)")
    active = box
    return active


def policy(settings: Any, work: list[tuple[Any, list[Path]]]) -> Policy:
    """What the run's workers may not touch and may spend: its results, logs, build cache,
    solutions and problems hidden (harness.sandbox.hidden_paths), the precompiled headers'
    folder shared, the limits of `settings.limits`."""
    places, limits = settings.places, settings.limits
    solutions = [path for _, paths in work for path in paths]
    problems = [source.reference for source, _ in work]
    hidden = hidden_paths(places.results_dir, places.log_dir, places.build_dir, solutions, problems)
    shared = (str(pch.folder_of(places.build_dir).resolve()),)
    memory = int(limits.memory_gb * (1 << 30))
    return Policy(hidden, shared, memory, max(limits.max_processes, 1))


def opened(mode: str, rules: Policy, build_dir: Path, device: str) -> tuple[Sandbox | None, str]:
    """A sandbox of `rules` on this host, its root in `build_dir`, for workers on `device`;
    or None and why not ('' when `mode` is 'off'). Raises UserError when `mode` is 'required'
    and this machine lacks something, or CUDA does not start inside it."""
    from harness.errors import UserError

    if mode == "off":
        return None, ""
    lacks = missing()
    if lacks and mode == "required":
        raise UserError(
            f"--sandbox required: this machine lacks {'; '.join(lacks)}; run with "
            "--sandbox auto (or off) to run without it"
        )
    if lacks:
        return None, f"this machine lacks {'; '.join(lacks)}"
    pch.folder_of(build_dir).mkdir(parents=True, exist_ok=True)  # Landlock allows what exists
    box = Sandbox(rules, build_dir / ".sandbox")
    why = box.cuda_fails() if device.startswith("cuda") else None
    if why and mode == "required":
        raise UserError(f"--sandbox required: CUDA does not start inside it here: {why}")
    if why:
        return None, f"CUDA does not start inside it here: {why}"
    return box, ""


def take(mode: str, rules: Policy, build_dir: Path, device: str) -> str | None:
    """Make a sandbox of `rules` this process's active one (a Ray actor's or task's: the
    driver made `rules` for the run, harness.run.raypool); None when it is on or `mode` is
    'off', else why not, in one line (a UserError's text when `mode` is 'required'). Done
    once per process and set of rules: later calls give the same answer."""
    global active
    key = (mode, rules, str(build_dir), device)
    if key not in _taken:
        from harness.errors import UserError

        try:
            box, why = opened(mode, rules, build_dir, device)
        except UserError as err:
            box, why = None, str(err)
        end()
        active = box
        _taken[key] = why or None
    return _taken[key]


def end() -> None:
    global active
    if active is not None:
        active.close()
        active = None
