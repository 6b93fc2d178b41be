"""A folder the harness cannot write, or a failure of the harness's own, is never recorded as the
solution's verdict: an unwritable results, log or build folder is refused in one line before any
work (exit 3); one that fails during the run, or a bug of the harness, stops the run in one line
(exit 4), keeping what was recorded before it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import run
from harness import codec, verdicts
from harness.loading import import_file
from harness.measure import worker
from harness.run import isolate
from tests.conftest import TOY, CliRun, toy_solution

QUICK = ["--device", "cpu", "--max-samples", "5", "--trials", "2", "--timeout", "60"]
GOOD = ["--problem", str(TOY), "--solution", toy_solution("good")]
FOLDER_FLAGS = ["--results-dir", "--log-dir", "--build-dir"]


@pytest.fixture(scope="module")
def recorded_ok(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results folder whose log holds one `ok` row of toy/good."""
    root = tmp_path_factory.mktemp("recorded")
    assert CliRun(root, root / "builds")(*GOOD, *QUICK) == run.EXIT_OK
    return root / "results"


def folders(tmp_path: Path, recorded_ok: Path) -> dict[str, Path]:
    """The three folders of a run, the results a copy of `recorded_ok`'s."""
    results = tmp_path / "results"
    shutil.copytree(recorded_ok, results)
    return {"--results-dir": results, "--log-dir": tmp_path / "logs", "--build-dir": tmp_path / "b"}


def under_a_file(tmp_path: Path) -> Path:
    """A folder that cannot be made, whoever runs the test (root too): its parent is a file."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    return blocker / "folder"


def log_text(results: Path) -> str:
    (log,) = results.glob("*/runs.jsonl")
    return log.read_text()


def flags(places: dict[str, Path]) -> list[str]:
    return [item for flag, folder in places.items() for item in (flag, str(folder))]


def one_error_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.mark.parametrize("broken", FOLDER_FLAGS)
def test_an_unwritable_folder_is_refused_in_one_line_before_any_work(
    tmp_path: Path, recorded_ok: Path, capfd: pytest.CaptureFixture[str], broken: str
) -> None:
    places = folders(tmp_path, recorded_ok)
    before = log_text(places["--results-dir"])
    places[broken] = under_a_file(tmp_path)
    assert run.main([*GOOD, *QUICK, *flags(places)]) == run.EXIT_INPUT
    line = one_error_line(capfd.readouterr().err)
    assert line.startswith(f"error: {broken} {places[broken]}: cannot create or write"), line
    assert "Not a directory" in line and f"pass {broken} a folder you can write" in line
    assert not list(tmp_path.glob("logs/*")), "a worker ran"
    if broken != "--results-dir":
        assert log_text(places["--results-dir"]) == before  # the ok row stays, alone


@pytest.mark.parametrize("broken", FOLDER_FLAGS)
def test_a_folder_failing_during_the_run_stops_it_without_a_verdict(
    tmp_path: Path,
    recorded_ok: Path,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    broken: str,
) -> None:
    # As if the folder broke after the check: a disk filled, a folder removed meanwhile.
    monkeypatch.setattr(codec, "unwritable", lambda folder: None)
    places = folders(tmp_path, recorded_ok)
    results = places["--results-dir"]
    before = log_text(results)
    if broken == "--results-dir":  # the log is there, with its row, but cannot be locked
        (lock,) = results.glob(f"*/{codec.LOCK_NAME}")
        lock.unlink()
        lock.mkdir()
    else:
        places[broken] = under_a_file(tmp_path)
    assert run.main([*GOOD, *QUICK, *flags(places)]) == run.EXIT_HARNESS
    line = one_error_line(capfd.readouterr().err)
    assert "Not a directory" in line or "Is a directory" in line, line
    assert "kept" in line
    assert log_text(results) == before  # no "crashed" or "runtime_error" row: the ok row stays


def test_an_error_the_solution_made_is_its_runtime_error(tmp_path: Path) -> None:
    solution = tmp_path / "mine.py"
    solution.write_text("def boom():\n    raise ValueError('mine')\n")
    try:
        import_file(solution).boom()
    except ValueError as err:
        raised_in_it = err
    made = [
        raised_in_it,
        KeyboardInterrupt(),
        MemoryError(),
        RuntimeError("CUDA error: an illegal memory access was encountered"),
    ]
    for err in made:
        blamed = worker._blame(err, solution, started=True)
        assert blamed.status == verdicts.RUNTIME_ERROR and not blamed.harness_error
        assert not blamed.detail.startswith("harness error"), blamed


def test_an_error_of_the_harness_is_no_verdict(tmp_path: Path) -> None:
    solution = tmp_path / "mine.py"
    solution.write_text("")
    after_it_ran = worker._blame(KeyError("a harness bug"), solution, started=True)
    before_it_ran = worker._blame(MemoryError(), solution, started=False)
    for blamed in (after_it_ran, before_it_ran):
        assert blamed.harness_error is True
        assert blamed.detail.startswith("harness error: ")


class Ended:
    """A worker process that has ended with `exitcode`."""

    def __init__(self, exitcode: int) -> None:
        self.exitcode = exitcode

    def join(self, timeout: float) -> None:
        pass


def test_a_worker_that_dies_before_its_job_began_is_the_harness_failure(tmp_path: Path) -> None:
    log = tmp_path / "missing.log"
    starting = isolate._died(Ended(1), log, "start")
    assert starting.harness_error is True
    assert "before it began its job" in starting.detail
    checking = isolate._died(Ended(1), log, "check")
    assert checking.status == verdicts.CRASHED and not checking.harness_error
