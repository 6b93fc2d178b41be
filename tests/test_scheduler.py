"""The scheduler (harness.run.scheduler) on a pool of stand-ins: no worker, no build.

What a real worker does is tested elsewhere; here, what the scheduler decides: which build
verdicts stand without a judge, the order of judging, one record per solution whatever the
slots, a harness failure that stops the run keeping what was recorded, and --resume's match.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from harness import verdicts
from harness.job import Ended, Job, Judged, Tick
from harness.record import Build, Machine, read
from harness.run import scheduler
from harness.run.discovery import ProblemSource, builds_at_import
from harness.run.reporting import Report
from harness.run.scheduler import Scheduler
from harness.run.session import Session
from harness.settings import Checking, Places, Settings
from harness.verdicts import HarnessError
from tests.conftest import TOY, toy_solution

MACHINE = Machine(device="cuda:0", gpu="Stand-in GPU", torch="2.x", cuda="13.0")


def verdict(kind: str, detail: str = "", **more: Any) -> Judged:
    return Judged(kind, detail, checks=3, **more)


class FakeSlot:
    """Judges by the solution's stem, as `verdicts` says; remembers what it judged."""

    def __init__(
        self, name: str, verdicts: dict[str, Judged], meet: threading.Barrier | None
    ) -> None:
        self.name, self.verdicts, self.meet = name, verdicts, meet
        self.judged: list[str] = []
        self.more: list[int] = []  # how many jobs each job was told may follow
        self.began: list[float] = []  # when each job began

    def run(self, job: Job, folders: list[Path], on_event: Any, more: int = 1) -> Ended:
        self.more.append(more)
        self.began.append(time.monotonic())
        if self.meet is not None and not self.judged:  # the first jobs of all slots at once
            self.meet.wait(timeout=20)
        on_event(Tick("time"))
        stem = Path(job.solution).stem
        self.judged.append(stem)
        where = dataclasses.replace(MACHINE, device=self.name)
        return Ended(self.verdicts.get(stem, verdict(verdicts.OK)), machine=where)


class FakePool:
    """Builds finish after `delays[stem]` seconds with `builds[stem]` (default ok)."""

    def __init__(
        self,
        slots: int = 1,
        builds: dict[str, Judged] | None = None,
        judged: dict[str, Judged] | None = None,
        delays: dict[str, float] | None = None,
        meet: bool = False,
        cached: tuple[str, ...] = (),
        holds_builds: bool = False,
    ) -> None:
        barrier = threading.Barrier(slots) if meet else None
        self.slots = [FakeSlot(f"cuda:{i}", judged or {}, barrier) for i in range(slots)]
        self.builds, self.delays, self.cached = builds or {}, delays or {}, cached
        self.holds_builds = holds_builds
        self.built_at: dict[str, float] = {}  # when each build ended
        self.started: list[str] = []

    def built(self, job: Job) -> bool:
        return Path(job.solution).stem in self.cached

    def build(self, job: Job, folders: list[Path], on_event: Any) -> Future[Ended]:
        stem = Path(job.solution).stem
        self.started.append(stem)
        future: Future[Ended] = Future()
        result = Ended(self.builds.get(stem, verdict(verdicts.OK)))

        def finish() -> None:
            time.sleep(self.delays.get(stem, 0.0))
            self.built_at[stem] = time.monotonic()
            future.set_result(result)

        threading.Thread(target=finish, daemon=True).start()
        return future

    def judged(self) -> list[str]:
        return [stem for slot in self.slots for stem in slot.judged]

    build_jobs = 2

    def close(self) -> None:
        pass


def session_on(tmp_path: Path, device: str = "cuda:0", **checking: Any) -> Session:
    places = Places(tmp_path / "results", tmp_path / "builds", tmp_path / "logs")
    settings = Settings(device=device, places=places, checking=Checking(**checking), audit=False)
    return Session(settings, described=MACHINE)


def toy_work(*names: str) -> list[tuple[ProblemSource, list[Path]]]:
    source = ProblemSource("toy", (TOY / "reference.py").resolve())
    return [(source, [Path(toy_solution(name)) for name in names])]


NAMES = ("good", "wrong_scale", "raises", "returns_list")


@pytest.fixture(autouse=True)
def every_solution_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The toy solutions build nothing, so a real run gives them no build job; these tests
    give each one (the fake pool's), as for solutions that build extensions."""
    monkeypatch.setattr(scheduler, "builds_at_import", lambda path: True)


def test_a_plain_solution_gets_no_build_job_and_is_judged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scheduler, "builds_at_import", builds_at_import)  # the real look
    pool = FakePool()
    session = session_on(tmp_path)
    Scheduler(session, pool, Report()).run(toy_work("good", "cpp_extension"))
    assert pool.started == ["cpp_extension"]  # good.py names no extension builder
    assert pool.judged() == ["good", "cpp_extension"]
    nothing = Scheduler(session_on(tmp_path / "b"), FakePool(), Report()).build(toy_work("good"))
    assert [(unit.solution.name, built.judged.detail) for unit, built in nothing] == [
        ("good.py", "nothing to build")
    ]


def test_a_build_whole_in_the_cache_gets_no_build_job_but_build_only_loads_it(
    tmp_path: Path,
) -> None:
    pool = FakePool(cached=("good",))
    Scheduler(session_on(tmp_path), pool, Report()).run(toy_work("good", "raises"))
    assert pool.started == ["raises"]  # a build job would only have loaded good's
    assert pool.judged() == ["good", "raises"]
    again = FakePool(cached=("good",))
    Scheduler(session_on(tmp_path / "b"), again, Report()).build(toy_work("good", "raises"))
    assert again.started == ["good", "raises"]  # --build-only says each build is there


@pytest.mark.parametrize("holds", [False, True])
def test_a_timed_run_judges_during_its_builds_only_where_the_pool_holds_them(
    tmp_path: Path, holds: bool
) -> None:
    pool = FakePool(delays={"raises": 1.0}, holds_builds=holds)
    Scheduler(session_on(tmp_path), pool, Report()).run(toy_work("good", "raises"))
    first_judged, last_built = pool.slots[0].began[0], pool.built_at["raises"]
    assert (first_judged < last_built) == holds  # else the timing would share the host


def test_a_compile_error_stands_without_a_judge_and_order_is_kept(tmp_path: Path) -> None:
    builds = {"raises": verdict(verdicts.COMPILE_ERROR, "main.cu:3: error: boom")}
    delays = {"good": 0.3}  # built last, judged first: in order
    pool = FakePool(
        builds=builds, delays=delays, judged={"wrong_scale": verdict(verdicts.INCORRECT)}
    )
    session = session_on(tmp_path)
    outcome = Scheduler(session, pool, Report()).run(toy_work(*NAMES))
    assert sorted(pool.started) == sorted(NAMES)  # every build started
    assert pool.judged() == ["good", "wrong_scale", "returns_list"]  # not the compile error
    # units not yet handed to a slot (the compile error's among them until its turn); the
    # last judged has none after it: no spare worker for a next
    assert pool.slots[0].more == [3, 2, 0]
    records = outcome[0].records
    assert [(r.solution, r.status) for r in records] == [
        ("good", verdicts.OK),
        ("wrong_scale", verdicts.INCORRECT),
        ("raises", verdicts.COMPILE_ERROR),
        ("returns_list", verdicts.OK),
    ]
    assert [r.solution for r in read(session.folder)] == list(NAMES)  # appended in order


def test_a_failed_import_on_a_gpu_run_is_judged_again_but_not_on_a_cpu_run(
    tmp_path: Path,
) -> None:
    builds = {"raises": verdict(verdicts.LOAD_ERROR, "importing it raised RuntimeError")}
    gpu = FakePool(builds=builds)
    Scheduler(session_on(tmp_path / "gpu"), gpu, Report()).run(toy_work("raises"))
    assert gpu.judged() == ["raises"]  # the build saw no GPU: the judge decides
    cpu = FakePool(builds=builds)
    session = session_on(tmp_path / "cpu", device="cpu", check_only=True)
    Scheduler(session, cpu, Report()).run(toy_work("raises"))
    assert cpu.judged() == []
    assert [r.status for r in read(session.folder)] == [verdicts.LOAD_ERROR]


def test_two_slots_judge_at_once_and_record_each_solution_once(tmp_path: Path) -> None:
    # Each slot's first job waits for the other's: a run judging one at a time would fail.
    pool = FakePool(slots=2, meet=True)
    session = session_on(tmp_path)
    Scheduler(session, pool, Report(), in_order=False).run(toy_work(*NAMES))
    records = read(session.folder)
    assert sorted(r.solution for r in records) == sorted(NAMES)
    assert {r.machine.device for r in records} == {"cuda:0", "cuda:1"}  # each where it ran


def test_a_harness_failure_stops_the_run_and_keeps_what_was_recorded(tmp_path: Path) -> None:
    failing = verdict(verdicts.RUNTIME_ERROR, "harness error: disk full", harness_error=True)
    pool = FakePool(judged={"raises": failing})
    session = session_on(tmp_path)
    with pytest.raises(HarnessError, match="disk full"):
        Scheduler(session, pool, Report()).run(toy_work("good", "raises", "wrong_scale"))
    assert [r.solution for r in read(session.folder)] == ["good"]
    assert "wrong_scale" not in pool.judged()


def test_resume_skips_only_what_the_run_would_make_again(tmp_path: Path) -> None:
    first = session_on(tmp_path, trials=2)
    Scheduler(first, FakePool(), Report()).run(toy_work("good", "wrong_scale"))
    again = session_on(tmp_path, trials=2, secret=7)  # a new secret: still the same run
    pool = FakePool()
    outcome = Scheduler(again, pool, Report(), again=True).run(toy_work("good", "raises"))
    assert pool.judged() == ["raises"] and pool.started == ["raises"]
    records = outcome[0].records
    assert [r.solution for r in records] == ["good", "raises"]  # the earlier one shown too
    assert len(read(again.folder)) == 3
    other = FakePool()  # more trials: another run, judged again
    Scheduler(session_on(tmp_path, trials=3), other, Report(), again=True).run(toy_work("good"))
    assert other.judged() == ["good"]


def test_settings_that_differ_by_design_do_not_block_a_resume(tmp_path: Path) -> None:
    base = session_on(tmp_path).settings
    moved = dataclasses.replace(
        base,
        device="cuda:1",
        checking=dataclasses.replace(base.checking, secret=12345),
        places=Places(tmp_path / "elsewhere"),
    )
    assert scheduler.comparable(moved) == scheduler.comparable(base)
    stricter = dataclasses.replace(base, checking=dataclasses.replace(base.checking, trials=9))
    assert scheduler.comparable(stricter) != scheduler.comparable(base)


def test_build_only_builds_every_solution_at_once_and_judges_and_records_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.run.driving import build_work

    built = (Build("ext", cuda=True),)
    builds = {
        "good": verdict(verdicts.OK, builds=built),
        "raises": verdict(verdicts.COMPILE_ERROR, "main.cu:3: error: boom"),
        "wrong_scale": verdict(verdicts.NO_GPU, "not run: no CUDA device", builds=built),
        "returns_list": verdict(verdicts.NO_GPU, "CUDA, not compiled", builds=()),
    }
    pool = FakePool(builds=builds, delays={"good": 0.2})
    places = Places(tmp_path / "results", tmp_path / "builds", tmp_path / "logs")
    settings = Settings(device="cuda:0", places=places, audit=False)
    session = Session(settings, recording=False, described=MACHINE)
    assert build_work(session, toy_work(*NAMES), pool) == 1  # two did not build
    assert sorted(pool.started) == sorted(NAMES) and pool.judged() == []
    assert not (tmp_path / "results").exists()
    out = capsys.readouterr().out
    assert "toy/good: built (ext)" in out and "toy/wrong_scale: built (ext)" in out
    assert "toy/raises: compile_error: main.cu:3: error: boom" in out
    assert "toy/returns_list: no_gpu: CUDA, not compiled" in out
    assert "build only: 2 of 4 built in " in out


def test_a_failure_in_a_build_callback_stops_the_run_instead_of_hanging(tmp_path: Path) -> None:
    """A build's result is read in its future's callback, where an exception would vanish and
    the run would wait for that unit for ever: the run stops with it instead."""
    pool = FakePool(builds={"good": object()})  # type: ignore[dict-item]
    session = session_on(tmp_path)
    raised: list[BaseException] = []

    def run() -> None:
        try:
            Scheduler(session, pool, Report()).run(toy_work("good"))
        except BaseException as err:  # the run's failure, as a caller sees it
            raised.append(err)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive(), "the run hung"
    assert raised and isinstance(raised[0], AttributeError)


def test_a_solution_builds_at_import_if_its_source_says_so_or_it_imports_a_neighbour(
    tmp_path: Path,
) -> None:
    files = {
        "plain.py": "import torch\nclass ModelNew: ...\n",
        "inline.py": "from torch.utils.cpp_extension import load_inline\n",
        "near.py": "import kernels\nclass ModelNew: ...\n",
        "kernels.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    found = {
        name: builds_at_import(tmp_path / name) for name in ("plain.py", "inline.py", "near.py")
    }
    assert found == {"plain.py": False, "inline.py": True, "near.py": True}
