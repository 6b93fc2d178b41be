"""The harness's side of a sandboxed job: each worker gets a scratch folder of its own; before
its job the harness copies in what the job may see (its solution with the files beside it,
its build from the cache), and afterwards takes out what the job made (its log, a new build)
and reads which rules it met.

The build cache stays the harness's: a worker builds in its scratch folder, and only the
harness writes a cache folder, the solution's own (named by its content and toolchain), with a
manifest of its modules' SHA-256; a cached build is copied in only if every module in it still
matches the manifest, so nothing another worker wrote there is ever loaded.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path

from harness import status
from harness.measure.judged import Judged, harness_failure
from harness.measure.sandboxed import VIOLATIONS
from harness.measure.worker import REFERENCE_TASKS, Job
from harness.toolchain import build_folder

MEMORY_RULE = "memory"  # named here, from the error; the others in harness.measure.sandboxed
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
        status=status.REJECTED,
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
    if judged.status != status.OK and MEMORY_ERRORS.search(judged.detail):
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
    return build_folder(
        settings.places.build_dir, job.problem, solution, settings.arch, job.content_hash
    )


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
