"""Each solution runs in its own process: whatever it does, the run goes on with a verdict."""

from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import pytest

from harness import verdicts
from harness.job import Ended, Event, Job, Judged, Phase, ReadyToTime, Tick
from harness.run import isolate, pool
from harness.run.pool import LocalSlot
from harness.settings import Checking, Places, Settings, StopRule, Timing
from harness.verdicts import UserError
from tests.conftest import TOY, CliRun, toy_solution

FIXTURES = ["good", "wrong_scale", "raises", "segfault", "hard_exit", "sys_exit", "hangs"]


@pytest.fixture(scope="module")
def toy_run(module_cli: CliRun) -> tuple[int, CliRun]:
    args = [a for name in FIXTURES for a in ("--solution", toy_solution(name))]
    # --timeout: the hang's limit, and room for the good solution's directed timing (its
    # referee, bare batches) on a 2-core machine under the whole suite's load (4 s was not)
    code = module_cli(
        "--problem", str(TOY), *args, "--timeout", "10", "--max-samples", "5", "--trials", "2"
    )
    return code, module_cli


@pytest.mark.parametrize(
    ("solution", "status", "detail"),
    [
        ("good", "ok", ""),
        ("wrong_scale", "incorrect", "case 'scale=3', seed "),
        ("raises", "runtime_error", "case 'default': ValueError: deliberate failure in forward"),
        ("segfault", "crashed", "worker killed by SIGSEGV; log ends: Fatal Python error"),
        ("hard_exit", "crashed", "worker exited with code 7 without reporting"),
        ("sys_exit", "crashed", "the solution called sys.exit(4)"),
        ("hangs", "timeout", "check step ran past its 10 s limit in case 'default' (--timeout"),
    ],
)
def test_each_failure_becomes_a_row_with_a_status(
    toy_run: tuple[int, CliRun], solution: str, status: str, detail: str
) -> None:
    _, cli = toy_run
    record = cli.record(solution)
    assert record["status"] == status
    assert record["detail"].startswith(detail)
    if status != "ok":
        assert record["log"] and record["log"].endswith(f"--{solution}.log")


def test_the_run_goes_on_and_fails_overall(toy_run: tuple[int, CliRun]) -> None:
    code, cli = toy_run
    assert code == 1
    assert {r["solution"] for r in cli.records()} == set(FIXTURES)


def test_a_good_solution_is_checked_on_every_case_and_timed_on_every_benchmark(
    toy_run: tuple[int, CliRun],
) -> None:
    record = toy_run[1].record("good")
    assert record["checks"] == 3 * 2  # three cases, two trials each
    assert [b["name"] for b in record["benchmarks"]] == ["default", "256x256"]
    for bench in record["benchmarks"]:
        for role in ("reference", "solution"):
            assert bench[role]["count"] == 5 and len(bench[role]["times_us"]) == 5
    assert record["benchmarks"][1]["inputs"] == ["float32[256,256]"]


def test_a_failed_solution_keeps_its_full_log(toy_run: tuple[int, CliRun]) -> None:
    record = toy_run[1].record("raises")
    log = toy_run[1].root / "logs"
    text = next(log.rglob("*--raises.log")).read_text()
    assert "ValueError: deliberate failure in forward" in text and "Traceback" in text
    assert record["log"].endswith("--raises.log")


def test_a_module_planted_where_python_imports_from_is_found_and_removed(tmp_path) -> None:
    """What shadows a known module or hooks Python's start-up goes; a new helper stays."""
    from harness.run import staging

    (tmp_path / "existing.py").write_text("")
    watched = staging.ImportPath([tmp_path])
    shadows = [tmp_path / "json.py", tmp_path / "existing.cpython-311-x86_64-linux-gnu.so"]
    hooks = [tmp_path / "evil.pth", tmp_path / "sitecustomize.py"]
    for path in [*shadows, *hooks, tmp_path / "own_helper.py"]:
        path.write_text("")
    (tmp_path / "numpy").mkdir()
    (tmp_path / "numpy" / "__init__.py").write_text("")
    (tmp_path / "not_a_package").mkdir()
    planted = sorted([*shadows, *hooks, tmp_path / "numpy"])
    assert sorted(watched.planted()) == planted
    assert sorted(watched.remove_planted()) == planted
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["existing.py", "not_a_package", "own_helper.py"]
    assert watched.planted() == []
    assert staging.rejected(Judged(verdicts.OK), planted).reason == "planted_module"


def test_a_spare_worker_runs_a_job_as_a_fresh_one_does(tmp_path: Path) -> None:
    places = Places(tmp_path / "results", tmp_path / "builds", tmp_path / "logs")
    settings = Settings(device="cpu", places=places, checking=Checking(trials=1, check_only=True))
    job = Job("toy", str(TOY / "reference.py"), toy_solution("raises"), "", "x", settings)

    def run_in(spare: isolate.Spare | None, name: str) -> Ended:
        return isolate.run_isolated(
            replace(job, log_path=str(tmp_path / name)), lambda e: None, spare
        )

    spare = isolate.Spare()
    dead = isolate.Spare()
    dead.process.kill()
    dead.process.join()
    results = [run_in(spare, "spare.log"), run_in(None, "fresh.log"), run_in(dead, "dead.log")]
    for ended in results:
        assert ended.judged.status == "runtime_error", ended
        assert "deliberate failure in forward" in ended.judged.detail
        assert set(ended.phase_s or {}) == {"start", "load", "check"}
        assert ended.phase == "check" and ended.case is not None  # where the worker ended
        assert {"inputs", "models", "solution"} <= set(ended.judged.parts_s or {})
    assert not spare.process.is_alive()  # used once, gone with its job
    assert "deliberate failure" in (tmp_path / "dead.log").read_text()  # a fresh worker ran it


def test_a_gpu_slot_runs_each_next_job_in_a_spare_started_ahead_of_it(
    tmp_path: Path,
) -> None:
    # As on a GPU (spares are off on a CPU slot): the second and third jobs get spares, every
    # job's time step passes the gate, and a spare that warmed did so before a timing; the last
    # job, with no job after it (`more` False), starts none and closes those left.
    places = Places(tmp_path / "results", tmp_path / "builds", tmp_path / "logs")
    rule = StopRule(warmup_ms=0, min_samples=3, max_samples=3)
    settings = Settings(
        device="cpu", places=places, checking=Checking(trials=1), timing=Timing(rule=rule)
    )
    job = Job("toy", str(TOY / "reference.py"), toy_solution("good"), "", "x", settings)
    slot = LocalSlot("cpu")
    slot.spares = True
    seen: list[Event] = []
    try:
        results = [
            slot.run(
                replace(job, log_path=str(tmp_path / f"{n}.log")),
                [],
                lambda event: seen.append(event),
                more=n < 2,
            )
            for n in range(3)
        ]
        assert not slot._ahead
    finally:
        slot.close()
    assert [r.judged.status for r in results] == ["ok"] * 3, results
    ahead = ["started ahead of its job" in (tmp_path / f"{n}.log").read_text() for n in range(3)]
    assert ahead == [False, True, True]
    assert seen.count(ReadyToTime()) == 3  # each passed the gate
    assert {type(event).__module__ for event in seen} == {"harness.job"}  # typed


class FakeSpare:
    """Stands in for isolate.Spare: ready once `imported` is set; records what it was told."""

    made: ClassVar[list["FakeSpare"]] = []

    def __init__(self) -> None:
        self.imported = self.warming = self.warmed = self.closed = False
        self.told: list[str] = []
        FakeSpare.made.append(self)

    def ready(self) -> bool:
        return self.imported

    def warm(self, device: str) -> None:
        self.told.append(f"warm {device}")
        self.warming = True

    def pause(self) -> None:
        if self.warming or not self.imported:
            self.told.append("pause")

    def resume(self) -> None:
        if self.told[-1:] == ["pause"]:
            self.told.append("resume")

    def close(self) -> None:
        self.closed = True


AHEAD = 3


def test_a_slots_timing_never_waits_for_a_spare(monkeypatch) -> None:
    """Spares start ahead of their jobs (the slot's `ahead`); each warms up once imported, only
    before the current job times; the timing waits for none of them: those still importing or
    warming are paused until the job ends; the last job closes the spares left."""

    FakeSpare.made = []
    monkeypatch.setattr(pool.isolate, "Spare", FakeSpare)
    script: list[str] = []  # what the fake job does: "event", "import", "time"

    def execute(job, folders, on_event, spare, before_timing) -> Ended:
        for step in script:
            if step == "import":
                FakeSpare.made[0].imported = True
            elif step == "time":
                before_timing()
            else:
                on_event(Tick("check") if step == "tick" else Phase("check"))
        return Ended(Judged(verdicts.OK))

    monkeypatch.setattr(pool, "execute", execute)
    monkeypatch.setattr(pool.machine, "loaded", lambda described, device: None)
    slot = LocalSlot("cuda:0", ahead=AHEAD)
    slot._described = object()  # type: ignore[assignment]
    job = Job("toy", "r.py", "s.py", "", "x", Settings(device="cuda:0"))
    script[:] = ["event", "tick", "time", "import", "tick"]  # imports end after the gate
    slot.run(job, [], lambda event: None, more=9)
    assert len(FakeSpare.made) == AHEAD
    # none warmed or waited for; all paused through the timing (made[0] imported only after)
    assert all(spare.told == ["pause", "resume"] for spare in FakeSpare.made)
    FakeSpare.made[1].imported = FakeSpare.made[2].imported = True
    FakeSpare.made[2].warmed = True  # warmed already: neither told to warm again nor paused
    script[:] = ["event", "time", "tick"]
    slot.run(job, [], lambda event: None, more=9)  # takes made[0]; made[1] is next, imported
    assert FakeSpare.made[1].told == ["pause", "resume", "warm cuda:0", "pause", "resume"]
    assert FakeSpare.made[2].told == ["pause", "resume"]  # the first job's pause only
    assert len(FakeSpare.made) == AHEAD + 1
    assert FakeSpare.made[-1].told == ["pause", "resume"]  # started now, not imported
    slot.run(job, [], lambda event: None, more=1)  # one job to follow: one spare kept
    assert len(FakeSpare.made) == AHEAD + 1 and len(slot._ahead) == 1
    assert FakeSpare.made[-1].closed  # the spare no job would use
    slot.run(job, [], lambda event: None, more=0)
    assert len(FakeSpare.made) == AHEAD + 1  # none started for the last job
    assert all(spare.closed for spare in FakeSpare.made[3:]) and not slot._ahead


def test_a_slot_keeps_as_many_spares_as_its_gpus_memory_and_its_share_of_cores_allow() -> None:
    gib = 1 << 30
    assert pool.spares_ahead(141 * gib, 16, 1) == pool.SPARES_MAX == 10  # the H200 host
    assert pool.spares_ahead(80 * gib, 16, 1) == 10  # an H100 80GB host
    assert pool.spares_ahead(141 * gib, 16, 2) == 8  # two GPUs share 16 cores
    assert pool.spares_ahead(40 * gib, 64, 1) == 5  # a 40 GB GPU
    assert pool.spares_ahead(4 * gib, 64, 1) == 1  # at least one
    assert pool.spares_ahead(None, None, 1) == 1


def test_harness_spares_sets_the_spares_and_a_bad_value_is_a_one_line_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(pool.SPARES_VARIABLE, raising=False)
    assert pool.spares_set() is None
    monkeypatch.setenv(pool.SPARES_VARIABLE, "10")
    assert pool.spares_set() == 10
    assert all(slot.ahead == 10 for slot in pool.LocalPool(["cpu"], 1).slots)
    for bad in ("0", "many", "-2"):
        monkeypatch.setenv(pool.SPARES_VARIABLE, bad)
        with pytest.raises(UserError, match="HARNESS_SPARES"):
            pool.spares_set()
