"""The parent's side of the sandbox (`--sandbox auto|required|off`); harness.sandbox is the
inside: the launcher each worker is started through, and the worker's audit hook.

Workers start through the launcher (`Sandbox.start`), which gives each a network namespace of its
own, Landlock rules (the run's results, logs, build cache and the other solutions unreadable;
only its scratch folder and the device nodes writable; no ptrace or signal out of it) and limits
on memory, processes and open files, then execs the interpreter. `missing` says what this
machine lacks for it.

Staging. Each worker gets a scratch folder of its own: before its job the harness copies in what
the job may see (its solution with the files beside it, its build from the cache: `stage`), and
afterwards takes out what the job made (its log, a new build: `finish`, `publish`) and reads
which rules it met. The build cache stays the harness's: a worker builds in its scratch folder,
and only the harness writes a cache folder, the solution's own (named by its content and
toolchain), with a manifest of its modules' SHA-256; a cached build is copied in only if every
module in it still matches the manifest (`intact`), so nothing another worker wrote there is ever
loaded.

Planted modules, sandbox or not. A solution runs with the user's permissions: it can write a
`torch.py` into the working directory or a `numpy.py` beside itself, and every later process
that imports from there (the next worker, the next run.py) would run that file instead of the
real module. So before each job the parent lists the importable entries of every folder on the
import path (its own sys.path, the working directory, the problem's and the solution's folders:
`ImportPath`), and after it, however the job ended, each new entry that shadows a module found
elsewhere on the path or in the standard library, and each new start-up hook (a `.pth` file,
`sitecustomize`, `usercustomize`), is removed, and the job is rejected ("planted_module"). Not
seen: files changed in place (an installed package edited), and new modules that shadow nothing
(a package installed under a new name stays installed; a solution's own new helper files stay
where it put them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from multiprocessing import spawn
from pathlib import Path
from typing import Any

from harness import sandbox, verdicts
from harness.job import REFERENCE_TASKS, Job, Judged, harness_failure
from harness.measure import pch
from harness.measure.builds import FAILED_BUILD
from harness.sandbox import POLICY_VARIABLE, SCRATCH_VARIABLE, VIOLATIONS, Policy, hidden_paths
from harness.toolchain import build_folder

LAUNCH = Path(__file__).resolve().parent.parent / "sandbox.py"
CUDA_PROBE_S = 120.0  # how long the check that CUDA starts inside the sandbox may take
_STARTING = threading.Lock()  # the interpreter and the environment a start takes are global


@contextlib.contextmanager
def spawning() -> Iterator[None]:
    """Around a spawned process's start: the parent's `__main__` left out of what the child is
    told to import first (multiprocessing re-runs the parent's script there: a user's script
    calling harness.run.evaluator without a main guard would run again in each worker, and
    one read from stdin cannot), under the lock every start takes."""
    main = sys.modules["__main__"]
    with _STARTING:
        spec, path = getattr(main, "__spec__", None), main.__dict__.pop("__file__", None)
        main.__spec__ = None
        try:
            yield
        finally:
            main.__spec__ = spec
            if path is not None:
                main.__file__ = path


def missing() -> list[str]:
    """What this machine lacks for the sandbox, a phrase each; empty when it has it all."""
    lacks = []
    if not sys.platform.startswith("linux"):
        return [f"Linux's namespaces and Landlock ({sys.platform} has neither)"]
    version = sandbox.abi()
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
        self.links = root / "b"  # the stable build names `stage` links
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
        with spawning():
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


def begin(settings: Any, work: list[tuple[Any, list[Path]]]) -> str | None:
    """Make the run's sandbox on this host the active one, as `settings.limits.sandbox` asks
    and this machine allows; the line that says why it is off, or None (also when 'off' was
    asked). Raises UserError when 'required' and something is missing."""
    global active
    mode = settings.limits.sandbox
    if mode == "off":
        return None
    places = settings.places
    active, why = opened(mode, policy(settings, work), places.build_dir, settings.device)
    return f"sandbox: off, {why} (--sandbox off hides this)" if why else None


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
    from harness.verdicts import UserError

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
        from harness.verdicts import UserError

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


MODULE_SUFFIXES = (".py", ".pyc", ".so", ".pyd")
HOOKS = frozenset({"sitecustomize", "usercustomize"})
REASON = "planted_module"


def import_folders(extra: list[Path]) -> list[Path]:
    """The folders a worker imports from: sys.path's (with '' as the working directory), the
    working directory, and `extra` (the problem's and the solution's folders)."""
    found: list[Path] = []
    entries: list[str | Path] = [*sys.path, os.getcwd(), *extra]
    for entry in entries:
        folder = Path(entry or os.getcwd()).resolve()
        if folder.is_dir() and folder not in found:
            found.append(folder)
    return found


def module_of(path: Path) -> str | None:
    """The module name an entry of an import folder provides ('x.pth' for a start-up hook), or
    None when Python would import nothing from it."""
    if path.suffix == ".pth":
        return path.name
    if path.suffix in MODULE_SUFFIXES:
        return path.name.split(".", 1)[0]  # x.cpython-311-x86_64-linux-gnu.so provides x
    if (path / "__init__.py").is_file():
        return path.name
    return None


def listing(folder: Path) -> dict[str, str]:
    """Entry name -> module name, for the importable entries of `folder`."""
    try:
        names = os.listdir(folder)
    except OSError:
        return {}
    return {name: module for name in names if (module := module_of(folder / name))}


class ImportPath:
    """The import folders' entries before a job; `remove_planted` after it."""

    def __init__(self, extra: list[Path]) -> None:
        self.before = {folder: listing(folder) for folder in import_folders(extra)}

    def planted(self) -> list[Path]:
        """New entries that shadow a module known before, or are start-up hooks."""
        known = {m for entries in self.before.values() for m in entries.values()}
        known |= set(sys.stdlib_module_names) | set(sys.builtin_module_names)
        found = []
        for folder, before in self.before.items():
            for name, module in listing(folder).items():
                if name not in before and (module in known or module in HOOKS or ".pth" in name):
                    found.append(folder / name)
        return found

    def remove_planted(self) -> list[Path]:
        """Remove what `planted` finds; return it."""
        found = self.planted()
        for path in found:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        return found


def rejected(judged: Judged, planted: list[Path]) -> Judged:
    """`judged`, rejected for the modules it planted, its measurements dropped."""
    shown = ", ".join(str(p) for p in planted[:3]) + (" ..." if len(planted) > 3 else "")
    detail = (
        f"wrote {shown} where Python imports from, shadowing a module (or adding a start-up "
        f"hook) for every later process; removed [rule: {REASON}]"
    )
    return replace(judged, status=verdicts.REJECTED, detail=detail, reason=REASON, benchmarks=())


MEMORY_RULE = "memory"  # named here, from the error; the others in harness.sandbox
MANIFEST = "harness-manifest.json"  # in a cache folder: {module's relative path: sha256}
MEMORY_ERRORS = re.compile(r"MemoryError|can't allocate memory|Cannot allocate memory")
BESIDE_LIMIT = 64 << 20  # bytes of files beside a solution copied in with it
CLAIM_POLL_S = 0.2
_HELD: dict[str, int] = {}  # scratch folder: the lock on its job's build name
_FOLLOWED: dict[str, int] = {}  # scratch folder: bytes of its log copied so far


def stage(job: Job, scratch: Path, links: Path) -> Job:
    """`job` as its sandboxed worker runs it: the solution, log and build folder in `scratch`,
    the solution and build under a stable name in `links` (the same for every job of the
    solution, so a build's commands, which name its folder and, with torch's `load`, the
    sources beside the solution, stay the same). A reference's job only gets its log there."""
    if job.task in REFERENCE_TASKS:
        log, build = scratch / "worker.log", scratch / "build"
        return dataclasses.replace(job, log_path=str(log), build_folder=str(build))
    solution = Path(job.solution)
    own = scratch / "solution"
    own.mkdir(exist_ok=True)
    shutil.copy2(solution, own / solution.name)
    _copy_beside(solution, own)
    build = scratch / "build"
    name = _claim(job, links, scratch)  # first: a build of it under way is published meanwhile
    cached = cache_folder(job)
    if intact(cached):
        shutil.copytree(cached, build, symlinks=True, dirs_exist_ok=True)
    build.mkdir(exist_ok=True)
    if (cached / FAILED_BUILD).is_file():  # its compile error, remembered (builds.remember_failure)
        shutil.copy2(cached / FAILED_BUILD, build / FAILED_BUILD)
    return dataclasses.replace(
        job,
        solution=str(name / own.name / solution.name),
        log_path=str(scratch / "worker.log"),
        build_folder=str(name / build.name),
    )


def _claim(job: Job, links: Path, scratch: Path) -> Path:
    """The name the worker sees its scratch folder by: the same for every job of the solution
    (a link to this worker's folder), since the build's commands hold it and ninja builds
    again when they change. A lock beside the link, held until the job ends (`finish`), makes
    a second job of the solution, in any process, wait for the first (whose build it then
    takes from the cache); one that waits longer than the build limit uses `scratch` itself."""
    cache = job.settings.places.build_dir
    link = links / cache_folder(job).relative_to(cache)
    link.parent.mkdir(parents=True, exist_ok=True)
    lock = os.open(link.with_name(f"{link.name}.lock"), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC)
    deadline = time.monotonic() + job.settings.limits.build_s
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            if time.monotonic() > deadline:
                os.close(lock)
                return scratch
            time.sleep(CLAIM_POLL_S)
    _HELD[str(scratch)] = lock
    fresh = link.with_name(f".{link.name}.{os.getpid()}.{threading.get_ident()}")
    fresh.unlink(missing_ok=True)
    fresh.symlink_to(scratch)
    os.replace(fresh, link)
    return link


def finish(job: Job, scratch: Path, judged: Judged) -> Judged:
    """After the job: its log appended to the run's, a new build published to the cache, the
    scratch folder removed; `judged` rejected when the worker met a rule of the sandbox."""
    try:
        follow(scratch, job)
    except OSError as err:  # the harness's folder, not the solution: no verdict on it
        why = err.strerror or str(err)
        judged = harness_failure(f"cannot write the worker's log {job.log_path}: {why}")
    build, cached = scratch / "build", cache_folder(job)
    made = _modules(build) if job.task not in REFERENCE_TASKS and build.is_dir() else {}
    # Compiled again (other commands: its precompiled header's folder, say), the same modules
    # or not: published, or every later job would compile it again.
    again = made and _ninja_logs(build) != _ninja_logs(cached)
    if made and (made != _recorded(cached) or not intact(cached) or again):
        publish(build, cached)
    failed = build / FAILED_BUILD
    if judged.status == verdicts.COMPILE_ERROR and failed.is_file():  # kept for the next run
        cached.mkdir(parents=True, exist_ok=True)
        shutil.copy2(failed, cached / FAILED_BUILD)
    met = violations(scratch, judged)
    shutil.rmtree(scratch, ignore_errors=True)
    _FOLLOWED.pop(str(scratch), None)
    held = _HELD.pop(str(scratch), None)
    if held is not None:
        os.close(held)
    if not met or judged.harness_error:
        return judged
    rule, what = met[0]
    if rule == MEMORY_RULE:  # a failure of its own, named: not a rejection
        return dataclasses.replace(judged, detail=f"{judged.detail} [rule: sandbox_{rule}]")
    after = "" if judged.ok else f"; then {judged.status}: {judged.detail[:120]}"
    return dataclasses.replace(
        judged,
        status=verdicts.REJECTED,
        reason=f"sandbox_{rule}",
        detail=f"the sandbox stopped it: {what} [rule: sandbox_{rule}]{after}",
    )


def follow(scratch: Path, job: Job) -> None:
    """Append what the worker's log in `scratch` gained since the last call to the job's log
    (called as the worker runs, and once at its end)."""
    log = scratch / "worker.log"
    if not log.exists():
        return
    whole = Path(job.log_path)
    done = _FOLLOWED.get(str(scratch), 0)
    with open(log, "rb") as part:
        part.seek(done)
        more = part.read()
    if more or not whole.exists():
        whole.parent.mkdir(parents=True, exist_ok=True)
        with open(whole, "ab") as out:
            out.write(more)
    _FOLLOWED[str(scratch)] = done + len(more)


def violations(scratch: Path, judged: Judged) -> list[tuple[str, str]]:
    """The rules the worker met, in order: those its audit hook wrote, then the memory limit
    where the job ended on it."""
    found = []
    path = scratch / VIOLATIONS
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            rule, _, what = line.partition("\t")
            found.append((rule, what))
    if judged.status != verdicts.OK and MEMORY_ERRORS.search(judged.detail):
        found.append((MEMORY_RULE, "it ran out of its memory limit (--memory-gb)"))
    return found


def publish(build: Path, folder: Path) -> None:
    """Put `build` in the cache as `folder`, with its manifest; atomically, so that two builds
    of one solution at once leave one whole folder."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    shutil.copytree(build, fresh, symlinks=True, dirs_exist_ok=True)
    (fresh / MANIFEST).write_text(json.dumps(_modules(fresh), indent=1, sort_keys=True))
    old = folder.with_name(f".{folder.name}.old.{os.getpid()}")
    if folder.exists():
        os.rename(folder, old)
    os.rename(fresh, folder)
    shutil.rmtree(old, ignore_errors=True)


def cache_folder(job: Job) -> Path:
    """The job's folder in the build cache (harness.toolchain.build_folder): its solution's
    own, named by its sources and toolchain."""
    settings = job.settings
    solution = Path(job.solution)
    return build_folder(settings.places.build_dir, job.problem, solution, settings.arch)


def _modules(folder: Path) -> dict[str, str]:
    """Each loadable module under `folder` (a .so), by relative path: its SHA-256."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*.so"))
        if path.is_file() and not path.is_symlink()
    }


def _ninja_logs(folder: Path) -> dict[str, bytes]:
    """What ninja noted of each build under `folder` (the commands it ran, and when)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob(".ninja_log"))}


def _recorded(folder: Path) -> dict[str, str] | None:
    try:
        return json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def intact(folder: Path) -> bool:
    """Whether `folder` is a published build whose modules all match its manifest."""
    recorded = _recorded(folder)
    return bool(recorded) and recorded == _modules(folder)


def _copy_beside(solution: Path, own: Path) -> None:
    """The files beside a solution (its .cu and headers), not other solutions (.py files),
    within BESIDE_LIMIT bytes in all."""
    left = BESIDE_LIMIT
    for entry in sorted(solution.parent.iterdir()):
        if entry == solution or entry.suffix == ".py" or entry.name.startswith("."):
            continue
        if entry.is_file() and entry.stat().st_size <= left:
            shutil.copy2(entry, own / entry.name)
            left -= entry.stat().st_size
        elif entry.is_dir() and not any(entry.rglob("*.py")):
            size = sum(p.stat().st_size for p in entry.rglob("*") if p.is_file())
            if size <= left:
                shutil.copytree(entry, own / entry.name, dirs_exist_ok=True)
                left -= size
