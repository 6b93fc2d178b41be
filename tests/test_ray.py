"""run.py --ray on a Ray cluster of three nodes on this host: a head without GPUs, where the
builds run, and two nodes with a logical GPU each, where the judging actors run (on the CPU:
torch sees no GPU behind a logical one). One C++ extension is compiled, once, in a fresh build
cache (a CUDA one compiles through the same build task: the compile check compiles every shipped
CUDA solution, so this test spares the two-core CI machine its minutes).

Not covered here: hosts that share no filesystem (every node here sees one), and real GPUs."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from ray.cluster_utils import Cluster  # noqa: E402

from harness.job import (  # noqa: E402
    Event,
    Job,
    Tick,
)
from harness.run import raypool, staging  # noqa: E402
from harness.settings import (  # noqa: E402
    Checking,
    Limits,
    Places,
    Settings,
    StopRule,
    Timing,
)
from harness.toolchain import source_hash  # noqa: E402
from harness.verdicts import UserError  # noqa: E402
from tests.conftest import REPO, TOY, toy_solution  # noqa: E402

QUICK = ["--device", "cpu", "--max-samples", "5", "--trials", "2", "--timeout", "20"]
NODE_MEMORY = 80 << 20  # each node's object store: builds of a few MB pass through it
EXPECTED = {"good": "ok", "wrong_scale": "incorrect", "cpp_extension": "ok"}
FIXTURES = REPO / "tests" / "fixtures" / "sandbox"
# Two attacks of tests/fixtures/sandbox, each stopped by the sandbox its judge's process made
ATTACKS = {"socket_out": "sandbox_network", "write_runs": "sandbox_filesystem"}
LACKS = staging.missing()


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """The cluster's address. Its files go under a short temporary folder (Ray's sockets live
    there, and a socket's path may not be long), removed afterwards. Its workers see
    SANDBOX_RUNS (write_runs' target, in ray_run's results): they take the environment the
    cluster started with."""
    root = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))
    (root / "ray").mkdir()
    head = {"num_cpus": 2, "num_gpus": 0, "include_dashboard": False}
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("RAY_TMPDIR", str(root))
            patch.setenv("SANDBOX_RUNS", str(RUNS_TARGET))
            made = Cluster(
                initialize_head=True, head_node_args={**head, "object_store_memory": NODE_MEMORY}
            )
            try:
                for _ in range(2):
                    made.add_node(num_cpus=1, num_gpus=1, object_store_memory=NODE_MEMORY)
                made.wait_for_nodes()
                yield made.address
            finally:
                made.shutdown()
    finally:
        shutil.rmtree(root, ignore_errors=True)


RUNS_TARGET = Path(tempfile.gettempdir()) / f"ray-run-{os.getpid()}" / "results" / "cpu"
RUNS_TARGET = RUNS_TARGET / "runs.jsonl"  # ray_run's own run log


def run_py(*args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "run.py", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def ray_run(cluster: str) -> Iterator[tuple[subprocess.CompletedProcess[str], Path]]:
    """One run.py --ray over the toy problem: a correct and a wrong solution in plain PyTorch,
    and a C++ extension built in a fresh build cache (a Ray build task compiles it); where
    this machine has the sandbox, in it (`required`), with two attacks beside them."""
    root = RUNS_TARGET.parents[2]
    shutil.rmtree(root, ignore_errors=True)
    solutions = [arg for name in EXPECTED for arg in ("--solution", toy_solution(name))]
    sandbox = ["--sandbox", "auto" if LACKS else "required"]
    attacks = [] if LACKS else [str(FIXTURES / f"{name}.py") for name in ATTACKS]
    solutions += [arg for path in attacks for arg in ("--solution", path)]
    places = ["--results-dir", str(root / "results"), "--log-dir", str(root / "logs")]
    places += ["--build-dir", str(root / "builds")]
    done = run_py("--problem", str(TOY), *solutions, "--ray", cluster, *QUICK, *sandbox, *places)
    yield done, root
    shutil.rmtree(root, ignore_errors=True)


def records(root: Path) -> list[dict[str, Any]]:
    logs = list((root / "results").glob("*/runs.jsonl"))
    return [json.loads(line) for log in logs for line in log.read_text().splitlines()]


def test_every_solution_is_judged_once_on_the_cluster_with_its_verdict(
    ray_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    done, root = ray_run
    assert done.returncode == 1, done.stderr  # wrong_scale is incorrect
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines()[0] == "ray: 2 judge(s) on 1 host(s), on cpu", done.stderr
    recorded = [r for r in records(root) if r["solution"] not in ATTACKS]
    assert sorted(r["solution"] for r in recorded) == sorted(EXPECTED)
    for record in recorded:
        assert record["status"] == EXPECTED[record["solution"]], record["detail"]
        # Where it ran: the judge's machine (host and device) and its load as the job began.
        machine = record["machine"]
        assert machine["host"] == socket.gethostname() and machine["device"] == "cpu"
        assert machine["load_1m"] is not None and machine["cpu_count"] == os.cpu_count()
        assert record["log"] is None or Path(record["log"]).exists()


@pytest.mark.skipif(bool(LACKS), reason=f"no sandbox here: {LACKS}")
def test_the_judges_on_the_cluster_stop_and_name_each_attack_in_their_sandbox(
    ray_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    done, root = ray_run
    assert "sandbox: off" not in done.stdout + done.stderr
    recorded = {r["solution"]: r for r in records(root)}
    for name, rule in ATTACKS.items():
        record = recorded[name]
        assert (record["status"], record["reason"]) == ("rejected", rule), record["detail"]
        assert f"[rule: {rule}]" in record["detail"]
    assert "forged" not in RUNS_TARGET.read_text()


def test_the_extension_was_compiled_by_a_build_task(
    ray_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    _, root = ray_run
    (record,) = [r for r in records(root) if r["solution"] == "cpp_extension"]
    assert [(b["cuda"], b.get("cached", False)) for b in record["builds"]] == [(False, False)]
    assert list((root / "builds" / "toy").glob("build-*/toy_scale_add/*.so"))


def test_a_build_unpacked_where_it_was_missing_is_up_to_date_for_ninja(
    ray_run: tuple[subprocess.CompletedProcess[str], Path], tmp_path: Path
) -> None:
    """A judge on another host finds the build task's folder in its own cache: here the one
    the build left, packed, removed, and unpacked where it was (paths are the same on
    every host), after which ninja has nothing to do where the judge's worker builds: in the
    sandbox, a copy in its scratch folder under the build's stable name (harness.run.staging),
    else the cache's folder itself."""
    _, root = ray_run
    (folder,) = [
        f for f in (root / "builds" / "toy").glob("build-*") if (f / "toy_scale_add").is_dir()
    ]
    packed = raypool.pack(folder)
    assert packed is not None
    before = {p.relative_to(folder): p.stat().st_mtime_ns for p in folder.rglob("*")}
    shutil.move(folder, tmp_path / "elsewhere")
    assert raypool.restore(folder, lambda: (folder.name, packed))
    assert {p.relative_to(folder): p.stat().st_mtime_ns for p in folder.rglob("*")} == before
    where = folder
    if not LACKS:  # as staging.stage stages it, mtimes kept
        link = root / "builds" / ".sandbox" / "b" / folder.relative_to(root / "builds")
        shutil.copytree(folder, tmp_path / "scratch" / "build", symlinks=True)
        link.unlink()  # the link to the build task's scratch folder, gone with it
        link.symlink_to(tmp_path / "scratch")
        where = link / "build"
    ninja = shutil.which("ninja") or str(Path(sys.executable).parent / "ninja")
    dry = subprocess.run(
        [ninja, "-n", "-C", str(where / "toy_scale_add")], capture_output=True, text=True
    )
    assert "no work to do" in dry.stdout, dry.stdout + dry.stderr


def test_a_build_is_unpacked_only_where_its_folder_is_missing(tmp_path: Path) -> None:
    built = tmp_path / "a" / "toy" / "mine-0123"
    (built / "ext").mkdir(parents=True)
    (built / "ext" / "ext.so").write_bytes(b"\x7fELF")
    os.utime(built / "ext" / "ext.so", ns=(1_000_000_000, 1_000_000_000))
    packed = raypool.pack(built)
    assert packed is not None
    shipped = (built.name, packed)
    fetched: list[int] = []

    def fetch() -> tuple[str, bytes]:
        fetched.append(1)
        return shipped

    elsewhere = tmp_path / "b" / "toy" / "mine-0123"
    assert raypool.restore(elsewhere, fetch)  # missing: unpacked, mtimes kept
    assert (elsewhere / "ext" / "ext.so").read_bytes() == b"\x7fELF"
    assert (elsewhere / "ext" / "ext.so").stat().st_mtime_ns == 1_000_000_000
    assert not raypool.restore(elsewhere, fetch)  # there now: not fetched again
    assert fetched == [1]
    empty = tmp_path / "c" / "toy" / "mine-0123"
    empty.mkdir(parents=True)  # an empty folder (made by a job that built nothing) is missing
    assert raypool.restore(empty, fetch) and (empty / "ext" / "ext.so").exists()
    other = tmp_path / "d" / "toy" / "mine-4567"  # another torch or target: another name
    assert not raypool.restore(other, fetch) and not other.exists()
    assert not list(tmp_path.rglob("*.part"))
    assert raypool.pack(tmp_path / "nothing") is None


def test_a_wrong_address_is_one_error_line_and_exit_3(tmp_path: Path) -> None:
    places = ["--results-dir", str(tmp_path / "r"), "--log-dir", str(tmp_path / "l")]
    solution = ["--solution", toy_solution("good")]
    done = run_py("--problem", str(TOY), *solution, "--ray", "127.0.0.1:1", *QUICK, *places)
    assert done.returncode == 3
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: --ray 127.0.0.1:1: no Ray cluster answers at 127.0.0.1:1")
    assert "ray start --head" in lines[0] and "drop --ray" in lines[0]


def test_ray_missing_is_one_line_saying_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as when not installed
    with pytest.raises(UserError) as raised:
        raypool.connect("auto", 2)
    assert str(raised.value) == (
        "--ray needs Ray, which is not installed here: pip install -r requirements-ray.txt"
    )


class Halt(Exception):
    """What the scheduler's watch raises when the run stops (its Stopped)."""


def toy_job(name: str, root: Path, limit_s: float) -> Job:
    solution = toy_solution(name)
    settings = Settings(
        device="cpu",
        checking=Checking(trials=1, check_only=True),
        timing=Timing(rule=StopRule(min_samples=5, max_samples=5)),
        limits=Limits(run_s=limit_s),
        places=Places(root / "results", root / "builds", root / "logs"),
    )
    content = source_hash(Path(solution))
    log = str(root / "logs" / f"{name}.log")
    reference = str(TOY / "reference.py")
    return Job("toy", reference, solution, log, content, settings)


def test_builds_run_as_tasks_and_a_stopped_judge_drops_its_job(
    cluster: str, tmp_path: Path
) -> None:
    pool = raypool.connect(cluster, 1)  # at most one build in flight
    try:
        assert (len(pool.slots), pool.device, pool.capability) == (2, "cpu", None)
        assert pool.described().host == socket.gethostname()
        folders = [Path(toy_solution("good")).parent, TOY]
        jobs = [toy_job(name, tmp_path, 600) for name in ("good", "wrong_scale")]
        builds = [pool.build(_as_build(job), folders, lambda e: None) for job in jobs]
        assert (len(pool._running), len(pool._waiting)) == (1, 1)  # the second waits its turn
        assert [f.result(timeout=120).judged.status for f in builds] == ["ok", "ok"]
        assert Path(jobs[0].log_path.removesuffix(".log") + ".build.log").exists()

        slot, ticks = pool.slots[0], []

        def stop_after_2_s(event: Event) -> None:
            ticks.append(event)
            if isinstance(event, Tick) and event.elapsed > 2:
                raise Halt

        with pytest.raises(Halt):  # hangs for ever (its limit is 600 s) unless stopped
            slot.run(toy_job("hangs", tmp_path, 600), folders, stop_after_2_s)
        assert ticks and all(isinstance(e, Tick) and e.phase == "remote" for e in ticks)
        # The actor judges one job at a time: it takes the next only once the hung one ended.
        started = time.monotonic()
        ended = slot.run(jobs[0], folders, _give_up_after(120))
        assert ended.judged.status == "ok", ended.judged.detail
        assert time.monotonic() - started < 120
        assert ended.machine is not None and ended.machine.host == socket.gethostname()
    finally:
        pool.close()


def _as_build(job: Job) -> Job:
    return dataclasses.replace(
        job, task="build", log_path=job.log_path.removesuffix(".log") + ".build.log"
    )


def _give_up_after(seconds: float) -> Any:
    def watch(event: Event) -> None:
        if isinstance(event, Tick) and event.elapsed > seconds:
            raise Halt

    return watch


def test_an_address_that_is_not_host_and_port_is_refused_before_ray_starts() -> None:
    with pytest.raises(UserError) as raised:
        raypool.connect("nonsense", 2)
    assert str(raised.value) == (
        "--ray 'nonsense': give 'auto' or the head's HOST:PORT (such as 10.0.0.1:6379)"
    )
    assert not ray.is_initialized()
