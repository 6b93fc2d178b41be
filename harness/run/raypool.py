"""Run on a Ray cluster (run.py --ray): builds as Ray CPU tasks, judging on one actor per GPU.

The interface of harness.run.pool's LocalPool, so the scheduler drives either. Each judging
actor holds one GPU (`num_gpus=1`: Ray sets CUDA_VISIBLE_DEVICES, so each timing has its GPU
alone) and judges one job at a time in a worker, as a local slot does; a cluster without GPUs
gets one actor on the CPU. A build is a task of one CPU, at most --build-jobs in flight. Results
come back to this process, which records them.

Every host needs this repository, with its environment, at the same path (actors and tasks
import the harness from it: PYTHONPATH), and the problems and solutions at the paths this host
names them by (a shared filesystem, or the same checkout everywhere); run.py runs on a host of
the cluster. --build-dir and --log-dir name a folder on each host.

Builds and logs travel between hosts as `pack` and `restore` below say.

The sandbox (--sandbox, harness.run.staging) is the run's on every host: this process makes
its rules from the run's folders, solutions and problems (`RayPool.sandbox`), and each judging
actor and build task makes it the active one of its process before its first job, as a local
run does, and says where it cannot ('required' then refuses: the run does not start, or a
build is not run).

A build and a log sent between the hosts of a Ray cluster.

A build made on one host is of no use to a judge on another: the build task packs its build
folder (tar, into Ray's object store), and a judge whose cache lacks that folder unpacks it
there first, mtimes kept, so ninja finds the build up to date (a build for another torch or
target has another folder name, and is not unpacked). A worker's log is written where it ran;
where the driver's host lacks it, it is written there from a copy that comes back with the
result.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import logging
import os
import shutil
import socket
import sys
import tarfile
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from harness.job import Ended, Event, Job, OnEvent, Tick, harness_failure
from harness.record import Machine
from harness.run import staging
from harness.run.pool import COMPILES_PER_BUILD, LocalSlot, execute
from harness.sandbox import Policy
from harness.settings import REPO
from harness.verdicts import HarnessError, UserError

INSTALL = "pip install -r requirements-ray.txt"
START = (
    "start one with `ray start --head` on one host and `ray start --address HEAD:6379` on the "
    "others, or drop --ray"
)
PROBE_S = 3.0  # how long the head's port may take to accept a connection
READY_S = 300.0  # how long the judging actors may take to start (each imports torch)
CLOSE_S = 5.0  # how long idle judges may take to close their spares and sandbox when the run ends
POLL_S = 0.25  # how often a slot's thread looks at its remote job (a stop is seen this fast)


def connect(address: str, build_jobs: int | None) -> RayPool:
    """The pool of the Ray cluster at `address` ('auto': the one this host belongs to), with
    at most `build_jobs` builds in flight (None: as many as the cluster has CPUs for). A
    UserError, in one line, where Ray is missing or no cluster answers."""
    try:
        import ray
    except ImportError:
        raise UserError(f"--ray needs Ray, which is not installed here: {INSTALL}") from None
    started = not ray.is_initialized()
    if started:
        _init(ray, address)
    try:
        return RayPool(ray, build_jobs, started)
    except BaseException:
        if started:
            ray.shutdown()
        raise


def _init(ray: Any, address: str) -> None:
    """Connect quietly: Ray's logs, its core's retries (written to the terminal's stderr as it
    connects) and the workers' output stay out of the terminal."""
    target = os.environ.get("RAY_ADDRESS", "auto") if address == "auto" else address
    if target != "auto" and "://" not in target:
        _probe(address, target)  # Ray itself retries an address nobody answers for minutes
    where = "is running on this host" if target == "auto" else f"answers at {target}"
    os.environ.setdefault("RAY_IGNORE_UNHANDLED_ERRORS", "1")  # a cancelled job's, left unread
    sys.stderr.flush()
    terminal = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        ray.init(
            address=address,
            log_to_driver=False,
            logging_level=logging.ERROR,
            runtime_env={"env_vars": _env_vars()},
        )
    except ConnectionError:
        raise UserError(f"--ray {address}: no Ray cluster {where}; {START}") from None
    except RuntimeError as err:  # a version mismatch, a cluster refusing this driver
        raise UserError(f"--ray {address}: Ray refused: {_first_line(err)}") from None
    finally:
        os.dup2(terminal, 2)
        os.close(terminal)


def _probe(address: str, target: str) -> None:
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(
            f"--ray {address!r}: give 'auto' or the head's HOST:PORT (such as 10.0.0.1:6379)"
        )
    try:
        socket.create_connection((host, int(port)), timeout=PROBE_S).close()
    except OSError as err:
        why = err.strerror or str(err) or type(err).__name__
        raise UserError(
            f"--ray {address}: no Ray cluster answers at {target} ({why}); {START}"
        ) from None


def _env_vars() -> dict[str, str]:
    """The environment of every actor and task: the repository importable (by the workers
    they spawn too, which inherit it), and the compile steps of one build."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {"PYTHONPATH": path, "MAX_JOBS": os.environ.get("MAX_JOBS", COMPILES_PER_BUILD)}


def _first_line(err: BaseException) -> str:
    cause = getattr(err, "cause", None)  # a RayTaskError: the exception raised remotely
    if isinstance(cause, BaseException):
        err = cause
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


class RayPool:
    """The cluster's judging actors as slots (`slots`), and its CPUs for builds (`build`)."""

    def __init__(self, ray: Any, build_jobs: int | None, started: bool) -> None:
        self.ray, self.limit, self.started = ray, build_jobs, started
        self.shipped: dict[tuple[str, str, str], Any] = {}  # a build's packed folder, by job
        self._lock = threading.Lock()
        self._waiting: deque[tuple[Job, list[Path], Future[Ended]]] = deque()
        self._running: dict[Any, Future[Ended]] = {}  # build ref: its future
        self._closed = False
        self.rules: tuple[str, Policy] | None = None  # the run's sandbox: mode and rules
        self._build_task = ray.remote(num_cpus=1, num_returns=2, max_retries=0)(build_remotely)
        self.slots = self._start_judges()
        self.device: str = self.slots[0].device
        gpu = self.slots[0].machine.capability
        self.capability = tuple(int(p) for p in gpu.split(".")) if gpu else None
        slots, hosts = len(self.slots), len({slot.machine.host for slot in self.slots})
        self.shown = f"ray: {slots} judge(s) on {hosts} host(s), on {self.device}"

    def _start_judges(self) -> list[RaySlot]:
        """One actor per GPU of the cluster (one on the CPU without any), once each started;
        a cluster of several GPU models is refused (one results folder, one build target)."""
        gpus = int(self.ray.cluster_resources().get("GPU", 0))
        judge = self.ray.remote(max_restarts=0, max_task_retries=0)(JudgeActor)
        wants = {"num_gpus": 1, "num_cpus": 1} if gpus else {"num_cpus": 1}
        actors = [judge.options(**wants).remote() for _ in range(max(gpus, 1))]
        described = [actor.describe.remote() for actor in actors]
        ready, _ = self.ray.wait(described, num_returns=len(described), timeout=READY_S)
        machines = self.ray.get(described) if len(ready) == len(described) else []
        models = sorted({str(m.gpu or "cpu") for m, _ in machines})
        if len(models) != 1:
            _kill(self.ray, actors)
            mixed = f"the cluster mixes devices ({', '.join(models)}); use one kind"
            late = f"{len(ready)} of {len(described)} judging actors started in {READY_S:g} s"
            raise UserError(f"--ray: {mixed if machines else late + ' (GPUs held elsewhere?)'}")
        return [RaySlot(self, a, m) for a, m in zip(actors, machines, strict=True)]

    def sandbox(self, settings: Any, work: list[tuple[Any, list[Path]]]) -> list[str]:
        """Give every judge, and the builds to come, the run's sandbox (`settings`' mode, rules
        made from `work` here); a line for each judge whose host cannot have it, saying why;
        under 'required' the run stops there (UserError)."""
        mode = settings.limits.sandbox
        if mode == "off":
            return []
        rules = staging.policy(settings, work)
        self.rules = (mode, rules)
        folder = Path(settings.places.build_dir).absolute()
        asked = [slot.actor.sandbox.remote(mode, rules, folder) for slot in self.slots]
        try:
            answers = self.ray.get(asked)
        except self.ray.exceptions.RayError as err:
            raise HarnessError(
                f"a Ray judge could not make the sandbox: {_first_line(err)}"
            ) from None
        said = []
        for slot, why in zip(self.slots, answers, strict=True):
            if why and mode == "required":
                raise UserError(f"on {slot.name}: {why}")
            if why:
                said.append(f"sandbox: off on {slot.name}, {why} (--sandbox off hides this)")
        return said

    def described(self) -> Machine:
        """The machine of the first slot (every slot's GPU is of the same model)."""
        return self.slots[0].machine

    holds_builds = False  # a build task runs on another host: the run waits for builds

    def built(self, job: Job) -> bool:
        """Never: a judge gets its build from the build task, packed (`pack`)."""
        return False

    def build(self, job: Job, folders: list[Path], on_event: OnEvent) -> Future[Ended]:
        """Start the build job of a solution (task "build") as a Ray task; its result when it is
        done. Its packed build folder is kept for the solution's judge."""
        done: Future[Ended] = Future()
        with self._lock:
            self._waiting.append((job, folders, done))
        self._submit()
        return done

    def _submit(self) -> None:
        """Start the waiting builds that the limit lets run."""
        started = []
        with self._lock:
            while self._waiting and not self._closed:
                if self.limit is not None and len(self._running) >= self.limit:
                    break
                job, folders, done = self._waiting.popleft()
                result, packed = self._build_task.remote(*absolute(job, folders), self.rules)
                self.shipped[shipped_key(job)] = packed
                self._running[result] = done
                started.append((job, result))
        for job, result in started:  # outside the lock: a done future calls back at once
            result.future().add_done_callback(functools.partial(self._built, job, result))

    def _built(self, job: Job, ref: Any, finished: Future[Shipped]) -> None:
        """A build task ended: its result to the scheduler, and the next build started."""
        with self._lock:
            done = self._running.pop(ref, None)
        if done is not None and done.set_running_or_notify_cancel():
            try:
                done.set_result(landed(finished.result(), job))
            except BaseException as err:
                done.set_exception(HarnessError(f"a Ray build task failed: {_first_line(err)}"))
        self._submit()

    def close(self) -> None:
        """Drop the builds not started, stop the running ones and the judges; disconnect when
        connect() connected."""
        with self._lock:
            self._closed = True
            waiting, running = list(self._waiting), list(self._running)
            self._waiting.clear()
            self.shipped.clear()
        for _, _, done in waiting:
            done.cancel()
        with contextlib.suppress(Exception):  # a broken connection stops nothing more
            for ref in running:
                self.ray.cancel(ref, force=True)
            closing = [slot.actor.close.remote() for slot in self.slots]
            self.ray.wait(closing, num_returns=len(closing), timeout=CLOSE_S)
        _kill(self.ray, [slot.actor for slot in self.slots])
        if self.started:
            self.ray.shutdown()


class RaySlot:
    """A judging actor, seen from this process: `run` blocks until its job is judged, and
    stays interruptible (the scheduler's `on_event` raises when the run stops)."""

    def __init__(self, pool: RayPool, actor: Any, described: tuple[Machine, str | None]) -> None:
        (self.pool, self.actor), (self.machine, ray_gpu) = (pool, actor), described
        self.device: str = self.machine.device or "cpu"
        self.name = f"ray {self.machine.host} {ray_gpu or self.device}"

    def run(self, job: Job, folders: list[Path], on_event: OnEvent, more: int = 1) -> Ended:
        """Judge `job` on this judge's actor; `more`: how many jobs may follow (the actor's
        slot starts spare workers for them, harness.run.pool.LocalSlot.run)."""
        ray = self.pool.ray
        packed = self.pool.shipped.pop(shipped_key(job), None)
        call = self.actor.run.remote(*absolute(job, folders), [packed], more)
        started = time.monotonic()
        try:
            while not ray.wait([call], timeout=POLL_S)[0]:
                elapsed = time.monotonic() - started
                on_event(Tick("remote", elapsed=elapsed))
            result = ray.get(call)
        except ray.exceptions.RayError as err:
            raise HarnessError(f"Ray judge {self.name} failed: {_first_line(err)}") from None
        except BaseException:  # stopped: the actor stops its worker (JudgeActor.run)
            ray.cancel(call)
            raise
        return landed(result, job)


class JudgeActor:
    """A judging actor (made remote by RayPool): a local slot on its GPU, which Ray chose and
    made the only one it sees, else on the CPU."""

    def __init__(self) -> None:
        import torch

        self.slot = LocalSlot("cuda:0" if torch.cuda.is_available() else "cpu")

    def describe(self) -> tuple[Machine, str | None]:
        """Its machine (harness.run.machine.describe), and the GPU Ray gave it ("gpu 3")."""
        import ray

        gpus = ray.get_runtime_context().get_accelerator_ids().get("GPU") or []
        return self.slot.machine(), f"gpu {gpus[0]}" if gpus else None

    def sandbox(self, mode: str, rules: Policy, build_dir: Path) -> str | None:
        """Judge in a sandbox of `rules` from now on (harness.run.staging.take); None when
        it is on, else why not."""
        return staging.take(mode, rules, build_dir, self.slot.device)

    def close(self) -> None:
        """Its spare workers closed and its sandbox's folders removed (before it is killed)."""
        self.slot.close()
        staging.end()

    def run(self, job: Job, folders: list[Path], packed: list[Any], more: int = 1) -> Shipped:
        """Judge `job` on this actor's device, first unpacking the build shipped with it
        (`packed`: [ObjectRef of build_remotely's second value, or None]) where missing here."""
        import ray

        if packed[0] is not None:
            restore(staging.cache_folder(job), lambda: ray.get(packed[0]))

        def stop_when_cancelled(event: Event) -> None:
            if ray.get_runtime_context().is_canceled():  # raised in the watch: the worker dies
                raise InterruptedError("the run stopped")

        return with_log(self.slot.run(job, folders, stop_when_cancelled, more), job)


def build_remotely(
    job: Job, folders: list[Path], rules: tuple[str, Policy] | None = None
) -> tuple[Shipped, Any]:
    """A Ray task: run the build job here, in a worker (harness.run.pool.execute), in the
    run's sandbox (`rules`: its mode and rules, RayPool.sandbox) where this host has it; its
    result and its packed build folder, (folder name, tar bytes), or None where nothing was
    built. Under 'required', a host without the sandbox builds nothing: a harness error."""
    if rules is not None:
        mode, policy = rules
        why = staging.take(mode, policy, job.settings.places.build_dir, "cpu")
        if why and mode == "required":
            return Shipped(Ended(harness_failure(f"on {socket.gethostname()}: {why}"))), None
    result = execute(job, folders, lambda event: None)
    folder = staging.cache_folder(job)
    packed = pack(folder) if result.judged.ok else None
    return with_log(result, job), (folder.name, packed) if packed else None


def shipped_key(job: Job) -> tuple[str, str, str]:
    return (job.problem, str(Path(job.solution).absolute()), job.content_hash)


def absolute(job: Job, folders: list[Path]) -> tuple[Job, list[Path]]:
    """`job` and `folders` with every path absolute: a Ray worker's working folder is not
    this process's."""
    places = job.settings.places
    paths = {f.name: Path(getattr(places, f.name)).absolute() for f in dataclasses.fields(places)}
    job = dataclasses.replace(
        job,
        reference=os.path.abspath(job.reference),
        solution=os.path.abspath(job.solution),
        log_path=os.path.abspath(job.log_path),
        settings=dataclasses.replace(job.settings, places=dataclasses.replace(places, **paths)),
    )
    return job, [folder.absolute() for folder in folders]


def _kill(ray: Any, actors: list[Any]) -> None:
    """Kill `actors` (each one's worker dies with it: harness.measure.worker's parent death
    signal), whatever the state of the connection."""
    for actor in actors:
        with contextlib.suppress(Exception):
            ray.kill(actor)


LOG_MAX_BYTES = 1 << 20  # the end of a longer log comes back
SHIP_MAX_BYTES = 512 << 20  # a bigger build folder is not shipped: its judge builds it again
SAFE: dict[str, Any] = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # 3.10.12+
# A file's mtime to the nanosecond, in its pax header: tar's own is a float, and ninja finds a
# build out of date when an output's mtime moved by a few nanoseconds (its deps log says when).
MTIME_NS = "KERNELBENCH.mtime_ns"


def pack(folder: Path) -> bytes | None:
    """`folder`'s files as a gzipped tar (mtimes kept), or None where it holds none or more
    than SHIP_MAX_BYTES."""
    if not folder.is_dir():
        return None
    sizes = [p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]
    if not sizes or sum(sizes) > SHIP_MAX_BYTES:
        return None

    def exact(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.pax_headers = {MTIME_NS: str(os.lstat(folder / info.name).st_mtime_ns)}
        return info

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        tar.add(folder, arcname=".", filter=exact)
    return buffer.getvalue()


def restore(folder: Path, fetch: Callable[[], Any]) -> bool:
    """Unpack the build that `fetch()` returns, (folder name, tar bytes) or None, as `folder`
    where this host's cache lacks it (missing or empty) and the name is `folder`'s; whether it
    did. Unpacked beside it, then renamed into place, so no judge sees half a folder."""
    if folder.is_dir() and any(folder.iterdir()):
        return False
    shipped = fetch()
    if shipped is None or shipped[0] != folder.name:
        return False
    folder.parent.mkdir(parents=True, exist_ok=True)
    part = folder.parent / f".{folder.name}.{os.getpid()}.{threading.get_ident()}.part"
    try:
        with tarfile.open(fileobj=io.BytesIO(shipped[1]), mode="r:gz") as tar:
            tar.extractall(part, **SAFE)
            for member in reversed(tar.getmembers()):  # a folder after what it holds
                ns = int(member.pax_headers[MTIME_NS])
                os.utime(part / member.name, ns=(ns, ns), follow_symlinks=False)
        os.rename(part, folder)  # over an empty folder too
    except (OSError, tarfile.TarError, KeyError, ValueError):  # or another judge was first
        return False
    finally:
        shutil.rmtree(part, ignore_errors=True)
    return True


@dataclasses.dataclass(frozen=True)
class Shipped:
    """How a job ended on a Ray host, with the end of its log, on its way back to the driver."""

    ended: Ended
    log: bytes | None = None


def with_log(ended: Ended, job: Job) -> Shipped:
    """`ended` with the end of the job's log, for a driver on another host."""
    try:
        with open(job.log_path, "rb") as log:
            log.seek(max(0, os.fstat(log.fileno()).st_size - LOG_MAX_BYTES))
            return Shipped(ended, log.read())
    except OSError:
        return Shipped(ended)


def landed(shipped: Shipped, job: Job) -> Ended:
    """How the job ended, as it came back, its log written where this host lacks it."""
    log = Path(job.log_path)
    if shipped.log is not None and not log.exists():
        with contextlib.suppress(OSError):  # an unwritable log folder stops the run elsewhere
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_bytes(shipped.log)
    return shipped.ended
