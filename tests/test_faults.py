"""Faults and bad input: each gets a one-line verdict, the run goes on, no result is lost.

Problem files that cannot be used are refused in one `error:` line (exit 3); a problem that
fails while running blames itself, not the solutions; a solution that answers in the wrong
form, kills itself, prints garbage or runs out of memory gets its own status. Then the run as
a whole: Ctrl-C in the middle, two runs writing one results folder, two runs building one
solution in one build folder at once. (Segfaults, exits, hangs, exceptions, a missing ModelNew,
syntax errors in solutions and wrong constructors are covered in test_isolation.py,
test_worker.py and test_cli.py.)
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import run
from harness import codec
from harness.record import LOG_NAME
from harness.record import read as read_records
from harness.run import driving
from harness.run.discovery import ProblemSource, resolve_problem
from harness.run.session import Session
from harness.settings import Checking, Limits, Places, Settings, StopRule, Timing
from tests.conftest import FIXTURES, REPO, TOY, CliRun, toy_solution
from tests.fixtures.faults import garbage_output

FAULTS = FIXTURES / "faults"
# On the CPU wherever they run: plain-PyTorch solutions such as toy_solutions/good.py pass
# there, while on a GPU they are rejected for launching no kernel of their own.
QUICK = ["--device", "cpu", "--max-samples", "5", "--trials", "2", "--timeout", "20"]
WAIT_S = 180.0  # generous: a run.py process imports torch, then spawns a worker per solution

# Kept here, not as a fixture file: a file that does not parse cannot be formatted or linted.
SYNTAX_ERROR_PROBLEM = '''"""Does not parse: forward's line lacks its colon."""

import torch.nn as nn


class Model(nn.Module):
    def forward(self, x)
        return x + 1


def get_inputs():
    return []


def get_init_inputs():
    return []
'''


def fault(name: str) -> str:
    return str(FAULTS / f"{name}.py")


def problem_source(path: Path) -> ProblemSource:
    return resolve_problem(str(path), run.PROBLEMS_DIR, run.SOLUTIONS_DIR)


@pytest.fixture
def syntax_error_problem(tmp_path: Path) -> Path:
    path = tmp_path / "problems" / "broken_syntax.py"
    path.parent.mkdir()
    path.write_text(SYNTAX_ERROR_PROBLEM)
    return path


def log_of(record: dict) -> Path:
    """A record's log file (recorded relative to the repository where it lies inside it)."""
    return REPO / record["log"]  # an absolute path stays itself


def only_error_line(err: str) -> str:
    """The one line run.py wrote to stderr, which must be an `error:` line."""
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def passed_every_check(record: dict) -> bool:
    """Correct on every case and trial of the toy, and ok."""
    return record["checks"] == 3 * 2 and record["status"] == "ok"


# 1. Problems that cannot be used, or that fail while running.


@pytest.mark.parametrize(
    ("problem", "message"),
    [
        ("syntax_error", "syntax error on line 7"),
        ("no_get_inputs", "is not a KernelBench problem: it lacks get_inputs"),
    ],
)
def test_an_unusable_problem_file_is_one_error_line_and_exit_3(
    cli: CliRun,
    capfd: pytest.CaptureFixture[str],
    syntax_error_problem: Path,
    problem: str,
    message: str,
) -> None:
    path = (
        syntax_error_problem if problem == "syntax_error" else Path(fault("problem_no_get_inputs"))
    )
    code = cli("--problem", str(path), "--solution", toy_solution("good"), *QUICK)
    assert code == run.EXIT_INPUT
    line = only_error_line(capfd.readouterr().err)
    assert message in line and str(path) in line
    assert not list(cli.root.glob("results/*/runs.jsonl"))  # nothing ran, nothing recorded


def test_broken_problems_among_others_do_not_stop_the_run(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], syntax_error_problem: Path
) -> None:
    settings = Settings(
        device="cpu",
        checking=Checking(trials=2),
        timing=Timing(rule=StopRule(min_samples=5, max_samples=5)),
        limits=Limits(run_s=20),
        places=Places(tmp_path / "results", tmp_path / "builds", tmp_path / "logs"),
    )
    session = Session(settings)
    good = [Path(toy_solution("good"))]
    work = [
        (problem_source(syntax_error_problem), good),
        (problem_source(TOY), good),
        (problem_source(Path(fault("problem_no_get_inputs"))), good),
    ]
    assert driving.run_work(session, work) == run.EXIT_INPUT
    err = capfd.readouterr().err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 2
    assert "broken_syntax.py: syntax error on line 7" in errors[0]
    assert "problem_no_get_inputs.py is not a KernelBench problem" in errors[1]
    recorded = read_records(session.folder)
    assert [(r.problem, r.solution) for r in recorded] == [("toy", "good")]
    assert passed_every_check(codec.encode(recorded[0])), recorded[0].detail
    assert re.search(r"^\| good +\| ", (session.folder / "toy.md").read_text(), re.MULTILINE)
    assert (session.folder / "summary.md").exists()


def test_get_inputs_raising_is_a_problem_error_for_each_solution(cli: CliRun) -> None:
    # --no-audit: the audit before the run would refuse this problem (the next test); here
    # the worker must contain the failure itself.
    solutions = ["--solution", toy_solution("good"), "--solution", toy_solution("wrong_scale")]
    problem = fault("problem_get_inputs_raises")
    assert cli("--problem", problem, *solutions, "--no-audit", *QUICK) == run.EXIT_FAILED
    recorded = cli.records()
    assert [r["solution"] for r in recorded] == ["good", "wrong_scale"]
    for record in recorded:
        assert record["status"] == "problem_error"
        assert "get_inputs" in record["detail"] and "\n" not in record["detail"]
        assert "deliberate failure in get_inputs" in record["detail"]


def test_get_inputs_raising_is_refused_by_the_audit_in_one_line(
    cli: CliRun, capfd: pytest.CaptureFixture[str]
) -> None:
    problem = fault("problem_get_inputs_raises")
    assert cli("--problem", problem, "--solution", toy_solution("good"), *QUICK) == run.EXIT_INPUT
    line = only_error_line(capfd.readouterr().err)
    assert "get_inputs" in line and "deliberate failure in get_inputs" in line
    assert not list(cli.root.glob("results/*/runs.jsonl"))


# 2-5. Solutions that answer in the wrong form, kill themselves, print garbage, or ask for
# more memory than there is: one run, one worker each, and a good solution last.

SOLUTION_FAULTS = {  # solution: (status, words its detail must hold)
    "returns_dict": ("incorrect", ["Tensor", "dict"]),
    "returns_str": ("incorrect", ["Tensor", "str"]),
    "wrong_shape": ("incorrect", ["shape", "(2112,)"]),
    "wrong_dtype": ("incorrect", ["dtype", "float64"]),
    "wrong_device": ("incorrect", ["meta"]),
    "sigkill": ("crashed", ["SIGKILL"]),
    "garbage_output": ("incorrect", ["differ"]),
    "cpu_out_of_memory": ("runtime_error", ["allocate"]),
}


@pytest.fixture(scope="module")
def faulty_run(module_cli: CliRun) -> tuple[int, CliRun]:
    args = [a for name in SOLUTION_FAULTS for a in ("--solution", fault(name))]
    code = module_cli("--problem", str(TOY), *args, "--solution", toy_solution("good"), *QUICK)
    return code, module_cli


@pytest.mark.parametrize(
    ("solution", "status", "words"),
    [(s, *v) for s, v in SOLUTION_FAULTS.items()],
)
def test_each_faulty_solution_gets_its_status_and_a_one_line_detail(
    faulty_run: tuple[int, CliRun], solution: str, status: str, words: list[str]
) -> None:
    record = faulty_run[1].record(solution)
    assert record["status"] == status, record["detail"]
    detail = record["detail"]
    assert detail and "\n" not in detail
    for word in words:
        assert word in detail, detail
    assert record["log"] and record["log"].endswith(f"--{solution}.log")


def test_the_run_goes_on_past_every_fault_and_keeps_every_record(
    faulty_run: tuple[int, CliRun],
) -> None:
    code, cli = faulty_run
    assert code == run.EXIT_FAILED
    (log,) = cli.root.glob("results/*/runs.jsonl")
    lines = log.read_text().splitlines()
    recorded = [json.loads(line) for line in lines]  # every line whole, valid JSON
    assert [r["solution"] for r in recorded] == [*SOLUTION_FAULTS, "good"]
    assert passed_every_check(recorded[-1]), recorded[-1]["detail"]
    table = (log.parent / "toy.md").read_text()
    for solution in [*SOLUTION_FAULTS, "good"]:
        assert re.search(rf"^\| {solution} +\| ", table, re.MULTILINE), solution


def test_garbage_printed_by_a_solution_lands_in_its_log_not_in_its_verdict(
    faulty_run: tuple[int, CliRun],
) -> None:
    cli = faulty_run[1]
    record = cli.record("garbage_output")
    assert record["status"] == "incorrect"  # not the "ok" it printed everywhere
    assert garbage_output.MARKER not in record["detail"]
    raw = log_of(record).read_bytes()
    text = raw.decode(errors="replace")
    marker = garbage_output.MARKER
    for where in ("<stdout>", "<stderr>", "fd 1", "fd 2"):
        assert f"{marker} {where}\n{garbage_output.FAKE}" in text, where
    for seed in (1, 2):
        assert garbage_output.garbage(seed) in raw
    assert "result: incorrect: " in text  # the worker's own line, after the fakes


def test_a_cpu_runs_logs_hold_no_profiler_noise_and_no_traceback_for_a_verdict(
    faulty_run: tuple[int, CliRun],
) -> None:
    """The profiler's library logs 'gpuGetDeviceCount failed' on a machine without a driver,
    which is no fault of the run's; an expected verdict (incorrect) is one line, no traceback."""
    cli = faulty_run[1]
    for solution in ("good", "wrong_shape", "returns_dict"):
        text = log_of(cli.record(solution)).read_text()
        assert "gpuGetDeviceCount" not in text, solution
        if solution != "good":
            assert "Traceback" not in text and "result: incorrect: " in text, solution


# 6-8. Whole runs as separate processes: interrupted, side by side, building side by side.


class Launcher:
    """Starts `python run.py ARGS` in sessions of their own, writing under `root`, each with
    SIGINT as `sigint` says (default: as a terminal's foreground job gets it, whatever this
    process inherited: a background job of a script starts with it ignored)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.started: list[subprocess.Popen[bytes]] = []

    def __call__(
        self, tag: str, *args: str, sigint: signal.Handlers = signal.SIG_DFL
    ) -> subprocess.Popen[bytes]:
        where = ["--log-dir", str(self.root / "logs")]
        if "--results-dir" not in args:
            where += ["--results-dir", str(self.root / "results")]
        if "--build-dir" not in args:
            where += ["--build-dir", str(self.root / "builds")]
        command = [sys.executable, "run.py", *args, *where]
        with (
            open(self.root / f"{tag}.out", "wb") as out,
            open(self.root / f"{tag}.err", "wb") as err,
        ):
            process = subprocess.Popen(
                command,
                cwd=REPO,
                stdout=out,
                stderr=err,
                start_new_session=True,
                preexec_fn=lambda: signal.signal(signal.SIGINT, sigint),
            )
        self.started.append(process)
        return process

    def stderr(self, tag: str) -> str:
        return (self.root / f"{tag}.err").read_text()

    def clean_up(self) -> None:
        """Kill whatever of the started runs is left (after a failed test)."""
        for process in self.started:
            for pid in [process.pid, *session_members(process.pid)]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            process.wait()


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Launcher]:
    launcher = Launcher(tmp_path)
    yield launcher
    launcher.clean_up()


def session_members(session: int) -> dict[int, str]:
    """The live processes (zombies aside) of session `session`: pid -> command line."""
    members = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            command = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        state, _ppid, _group, sid = text[text.rindex(")") + 2 :].split()[:4]
        if int(sid) == session and state != "Z":
            members[int(stat.parent.name)] = command
    return members


def wait_for(what: str, condition: Callable[[], object], timeout: float = WAIT_S) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"gave up after {timeout:g} s waiting for {what}")


def whole_records(results: Path) -> list[dict]:
    """The complete lines of the run log under `results` (a line being written is not one)."""
    logs = list(results.glob(f"*/{LOG_NAME}"))
    text = logs[0].read_text() if logs else ""
    return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]


def finish(process: subprocess.Popen[bytes], timeout: float = WAIT_S) -> int:
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(
            f"run.py (pid {process.pid}) still running after {timeout:g} s"
        ) from None


@pytest.mark.parametrize(
    "inherited", [signal.SIG_DFL, signal.SIG_IGN], ids=["sigint-default", "sigint-ignored"]
)
def test_ctrl_c_keeps_what_was_recorded_and_leaves_no_worker(
    tmp_path: Path, launch: Launcher, inherited: signal.Handlers
) -> None:
    # SIG_IGN: run.py started as a background job of a script is still stopped by SIGINT.
    solutions = ["--solution", toy_solution("good"), "--solution", toy_solution("hangs")]
    quick = ["--device", "cpu", "--max-samples", "5", "--trials", "2", "--timeout", "120"]
    process = launch("interrupted", "--problem", str(TOY), *solutions, *quick, sigint=inherited)
    wait_for("the first record", lambda: whole_records(tmp_path / "results"))

    def hangs_started() -> bool:  # its judge is past its start: it logged its job (the build
        # job, which ran before, logs into the same file with task 'build')
        logs = tmp_path.glob("logs/*/02-toy--hangs.log")
        return any("'task': 'solution'" in p.read_text() for p in logs)

    wait_for("the second worker to run", hangs_started)
    workers = {
        pid for pid, command in session_members(process.pid).items() if "spawn_main" in command
    }
    assert len(workers) == 1, session_members(process.pid)  # the hangs worker

    os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the whole foreground process group

    assert finish(process, 60) == run.EXIT_INTERRUPTED
    err = launch.stderr("interrupted")
    assert "Traceback" not in err, err
    said = [line for line in err.splitlines() if "interrupted" in line]
    assert len(said) == 1 and said[0].startswith("interrupted: "), err
    (log,) = tmp_path.glob(f"results/*/{LOG_NAME}")
    text = log.read_text()
    assert text.endswith("\n") and len(text.splitlines()) == 1
    record = json.loads(text)
    assert record["solution"] == "good" and passed_every_check(record), record["detail"]
    table = (log.parent / "toy.md").read_text()
    assert re.search(r"^\| good +\| ", table, re.MULTILINE) and "| hangs" not in table
    assert "good" in (log.parent / "toy.csv").read_text()
    # The worker was killed and reaped; the rest of the session (multiprocessing's resource
    # tracker) ends once run.py has.
    assert not workers & set(session_members(process.pid))
    wait_for("every process of the run to end", lambda: not session_members(process.pid), 30)


def test_a_killed_run_takes_its_hanging_worker_with_it(tmp_path: Path, launch: Launcher) -> None:
    quick = ["--device", "cpu", "--timeout", "120"]
    process = launch(
        "killed", "--problem", str(TOY), "--solution", fault("hangs_and_says_so"), *quick
    )

    def hanging() -> bool:  # inside forward, where it no longer talks to run.py
        return any("hanging in forward" in p.read_text() for p in tmp_path.glob("logs/*/*.log"))

    wait_for("the worker to hang", hanging)
    workers = {  # its worker, and its referee (started as the worker began its checks)
        pid for pid, command in session_members(process.pid).items() if "spawn_main" in command
    }
    assert len(workers) == 2, session_members(process.pid)
    process.kill()  # SIGKILL: run.py gets no chance to stop its worker itself
    process.wait()

    def gone() -> bool:
        return not workers & set(session_members(process.pid))

    wait_for("the worker and its referee to die with run.py", gone, 10)


def test_a_ctrl_c_that_reaches_a_starting_worker_does_not_kill_it(
    tmp_path: Path, launch: Launcher
) -> None:
    # A terminal's Ctrl-C reaches every process of the group, workers too. One still importing
    # torch (before it can ignore the signal) must not die of it, nor print a traceback.
    process = launch("startup", "--problem", str(TOY), "--solution", toy_solution("good"), *QUICK)

    def starting_worker() -> int | None:
        members = session_members(process.pid).items()
        return next((pid for pid, command in members if "spawn_main" in command), None)

    worker = wait_for("the worker to start", starting_worker)
    assert isinstance(worker, int)
    os.kill(worker, signal.SIGINT)
    assert not list(tmp_path.glob("logs/*/*.log")), "the worker was past its start: try again"

    code = finish(process)
    err = launch.stderr("startup")
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    (record,) = whole_records(tmp_path / "results")
    assert passed_every_check(record), record["detail"]  # not "crashed: killed by SIGINT"
    assert code == (run.EXIT_OK if record["status"] == "ok" else run.EXIT_FAILED)


@pytest.fixture(scope="module")
def two_runs_one_folder(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[list[int], Path]]:
    launch = Launcher(tmp_path_factory.mktemp("side_by_side"))
    good, twin = toy_solution("good"), fault("good_twin")
    first = ["--solution", good, "--solution", twin, "--solution", good]
    second = ["--solution", twin, "--solution", good, "--solution", twin]
    runs = [
        launch(tag, "--problem", str(TOY), *sols, *QUICK)
        for tag, sols in [("a", first), ("b", second)]
    ]
    try:
        codes = [finish(process) for process in runs]
        (log,) = launch.root.glob(f"results/*/{LOG_NAME}")
        yield codes, log.parent
    finally:
        launch.clean_up()


def test_two_runs_writing_one_results_folder_keep_every_record(
    two_runs_one_folder: tuple[list[int], Path],
) -> None:
    codes, folder = two_runs_one_folder
    lines = (folder / LOG_NAME).read_text().splitlines()
    recorded = [json.loads(line) for line in lines]  # every line whole, valid JSON
    seen = [(r["solution"], r["status"], r["checks"], r["detail"]) for r in recorded]
    assert len(recorded) == 6 and all(passed_every_check(r) for r in recorded), seen
    by_run: dict[str, list[str]] = {}
    for record in recorded:
        by_run.setdefault(record["run_id"], []).append(record["solution"])
    assert sorted(by_run.values()) == [
        ["good", "good_twin", "good"],
        ["good_twin", "good", "good_twin"],
    ]
    each_passed = [all(r["status"] == "ok" for r in recorded if r["run_id"] == i) for i in by_run]
    assert sorted(codes) == sorted(run.EXIT_OK if ok else run.EXIT_FAILED for ok in each_passed)
    table = (folder / "toy.md").read_text()
    for solution in ("good", "good_twin"):
        assert re.search(rf"^\| {solution} +\| ", table, re.MULTILINE), table
    assert (folder / "toy.csv").exists() and (folder / "summary.md").exists()
    assert not list(folder.glob(".*.tmp"))  # no temporary file of an atomic write left over


def test_two_runs_writing_one_results_folder_both_pass(
    two_runs_one_folder: tuple[list[int], Path],
) -> None:
    assert two_runs_one_folder[0] == [run.EXIT_OK, run.EXIT_OK]


@pytest.fixture(scope="module")
def two_runs_one_build(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[list[int], Launcher]]:
    launch = Launcher(tmp_path_factory.mktemp("one_build"))
    builds = launch.root / "shared-builds"  # fresh: one run builds, the other waits for it
    args = ["--problem", str(TOY), "--solution", toy_solution("cpp_extension"), *QUICK]
    runs = [
        launch(tag, *args, "--build-dir", str(builds), "--results-dir", str(launch.root / tag))
        for tag in ("a", "b")
    ]
    try:
        yield [finish(process, 600) for process in runs], launch
    finally:
        launch.clean_up()


@pytest.mark.build
def test_two_runs_building_one_solution_in_one_build_folder_both_load_it(
    two_runs_one_build: tuple[list[int], Launcher],
) -> None:
    codes, launch = two_runs_one_build
    folders = set()
    for tag, code in zip(("a", "b"), codes, strict=True):
        (record,) = whole_records(launch.root / tag)
        assert passed_every_check(record), record["detail"]
        assert code == (run.EXIT_OK if record["status"] == "ok" else run.EXIT_FAILED)
        assert [b["name"] for b in record["builds"]] == ["toy_scale_add"]
        text = log_of(record).read_text()
        folders |= set(re.findall(r"^build folder: (.+)$", text, re.MULTILINE))
    (folder,) = folders  # one folder, shared
    assert Path(folder).is_relative_to(launch.root / "shared-builds")


@pytest.mark.build
def test_two_runs_building_one_solution_in_one_build_folder_both_pass(
    two_runs_one_build: tuple[list[int], Launcher],
) -> None:
    assert two_runs_one_build[0] == [run.EXIT_OK, run.EXIT_OK]
