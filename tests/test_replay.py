"""Replaying a failure: --case and --check-only, the replay line printed under a failed verdict
(run again, it gets the same verdict), the run id line that ends a run, and --solution NAME."""

from __future__ import annotations

import re
import shlex
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import run
from harness import record as run_log
from harness import settings
from harness.loading import Seeds, import_file, load_problem
from harness.matching import Tolerance
from harness.measure.checking import check_cases
from harness.run import driving, replay
from harness.run.discovery import ProblemSource, given_solutions, resolve_problem
from harness.settings import Checking, Places, Settings, StopRule, Timing
from harness.verdicts import UserError, Verdict
from tests.conftest import FIXTURES, REPO, TOY, CliRun, toy_solution
from tests.records_factory import bench, record

TOY_MEAN = FIXTURES / "toy_mean"
SUBSAMPLE = FIXTURES / "cheats_mean" / "subsample_mean.py"  # incorrect on the 'spike' case
WRONG_WHEN_TIMED = FIXTURES / "cheats" / "wrong_when_timed.py"  # right in checks, not when timed


def replay_lines(err: str) -> list[str]:
    return [line.split("replay: ", 1)[1] for line in err.splitlines() if "  replay: " in line]


def run_replay(cli: CliRun, line: str) -> int:
    """Run a printed replay line as typed: `python run.py` and its flags."""
    words = shlex.split(line)
    assert words[:2] == ["python", "run.py"]
    return cli(*words[2:])


def test_an_incorrect_solution_is_replayed_on_its_case_with_the_same_verdict(
    cli: CliRun, capfd
) -> None:
    common = ("--problem", str(TOY_MEAN), "--solution", str(SUBSAMPLE), "--device", "cpu")
    assert cli(*common, "--trials", "2") == run.EXIT_FAILED
    first = cli.record("subsample_mean")
    assert first["status"] == "incorrect" and first["detail"].startswith("case 'spike', seed ")
    err = capfd.readouterr().err
    (line,) = replay_lines(err)
    assert f"  log: {first['log']}" in err.splitlines()  # the failure's whole log, named
    assert Path(first["log"]).exists() or (REPO / first["log"]).exists()
    secret = first["settings"]["checking"]["secret"]
    # The seed named is the trial's own, drawn from --seed and --secret as the detail says.
    named = re.match(
        r"case 'spike', seed (\d+) \(trial (\d+), from --seed 42 and --secret\)", first["detail"]
    )
    assert named, first["detail"]
    cases = [c.name for c in load_problem("toy_mean", TOY_MEAN / "reference.py").cases]
    assert int(named[1]) == Seeds(42, secret).trial(cases.index("spike"), int(named[2]))
    assert "python run.py --problem tests/fixtures/toy_mean" in line
    assert "--solution tests/fixtures/cheats_mean/subsample_mean.py --case spike" in line
    assert f"--seed 42 --secret {secret} --trials 2 --device cpu" in line
    assert line.endswith("--check-only")

    assert run_replay(cli, line) == run.EXIT_FAILED
    again = cli.record("subsample_mean")
    assert again["run_id"] != first["run_id"]
    assert (again["status"], again["detail"]) == (first["status"], first["detail"])  # same inputs
    assert again["settings"]["checking"]["case"] == "spike"
    assert again["cases"] == 1 and again["benchmarks"] == []


def test_a_run_that_recorded_nothing_is_replayed_without_recording(cli: CliRun, capfd) -> None:
    common = ("--problem", str(TOY_MEAN), "--solution", str(SUBSAMPLE), "--device", "cpu")
    assert cli(*common, "--trials", "2", "--no-record") == run.EXIT_FAILED
    (line,) = replay_lines(capfd.readouterr().err)
    assert line.endswith("--check-only --no-record")
    assert run_replay(cli, line) == run.EXIT_FAILED
    assert "case 'spike'" in capfd.readouterr().out
    assert not list(cli.root.glob("results/*/runs.jsonl"))


def test_a_failure_while_timing_is_replayed_by_the_whole_run(cli: CliRun, capfd) -> None:
    flags = ("--device", "cpu", "--trials", "1", "--max-samples", "20")
    assert cli("--problem", str(TOY), "--solution", str(WRONG_WHEN_TIMED), *flags) == 1
    first = cli.record("wrong_when_timed")
    assert first["detail"].startswith("benchmark '") and ", timed call " in first["detail"]
    (line,) = replay_lines(capfd.readouterr().err)
    assert "--case" not in line and "--check-only" not in line
    assert "--max-samples 20" in line  # the timing flags reach the timed calls again

    assert run_replay(cli, line) == run.EXIT_FAILED
    again = cli.record("wrong_when_timed")
    # Which timed calls are spot-checked is drawn unseeded (harness.measure.feeding), so the
    # same failure may be caught on another call, or another benchmark.
    assert again["status"] == "incorrect" and ", timed call " in again["detail"]


def test_a_crash_is_replayed_on_the_case_it_died_in(cli: CliRun, capfd) -> None:
    cli("--problem", str(TOY), "--solution", toy_solution("segfault"), "--device", "cpu")
    assert cli.record("segfault")["status"] == "crashed"
    (line,) = replay_lines(capfd.readouterr().err)
    assert "--case default" in line and line.endswith("--check-only")
    assert run_replay(cli, line) == run.EXIT_FAILED
    assert cli.record("segfault")["status"] == "crashed"


def test_a_correct_solution_gets_no_replay_line_and_check_only_times_nothing(
    cli: CliRun, capfd
) -> None:
    args = ("--problem", str(TOY), "--solution", toy_solution("good"), "--device", "cpu")
    assert cli(*args, "--check-only", "--trials", "1") == run.EXIT_OK
    captured = capfd.readouterr()
    assert not replay_lines(captured.err)
    ran = cli.record("good")
    assert ran["status"] == "ok" and ran["benchmarks"] == [] and ran["checks"] == 3
    assert ran["settings"]["checking"]["check_only"] is True
    table = next((cli.root / "results").glob("*/toy.md")).read_text()
    row = next(line for line in table.splitlines() if line.startswith("| good"))
    assert "| -  " in row and "| ok " in row and "checked only, not timed (--check-only)" in row
    compact = next(line for line in captured.out.splitlines() if line.startswith("good "))
    assert compact.split()[:3] == ["good", "-", "ok"]
    assert "checked only, not timed (--check-only)" in captured.out  # in its line or a footnote


def test_an_unknown_case_is_one_line_naming_the_cases(cli: CliRun, capfd) -> None:
    args = ("--problem", str(TOY), "--solution", toy_solution("good"), "--device", "cpu")
    assert cli(*args, "--case", "5x8") == run.EXIT_INPUT
    errors = [line for line in capfd.readouterr().err.splitlines() if line.startswith("error")]
    assert errors == [
        "error: --case '5x8': problem 'toy' has no such case; its cases: default, scale=3, 5x7"
    ]
    assert not list((cli.root / "results").glob("*/runs.jsonl"))


def test_case_needs_a_problem(capfd) -> None:
    with pytest.raises(SystemExit) as exit_:
        run.main(["--all", "--case", "default"])
    assert exit_.value.code == run.EXIT_USAGE
    assert "--case needs --problem" in capfd.readouterr().err


def test_one_case_keeps_its_seeds_and_the_others_are_left_out() -> None:
    problem = load_problem("toy", TOY / "reference.py")
    model_new = import_file(Path(toy_solution("wrong_scale"))).ModelNew  # wrong on 'scale=3'
    cpu, checking = torch.device("cpu"), Checking(trials=2, seed=3, secret=99)
    heard: list[str] = []
    assert check_cases(problem, model_new, cpu, replace(checking, case="5x7"), heard.append) == 2
    assert heard == ["5x7"]
    details = []
    for chosen in (checking, replace(checking, case="scale=3")):
        with pytest.raises(Verdict) as caught:
            check_cases(problem, model_new, cpu, chosen)
        details.append(caught.value.detail)
    assert details[0] == details[1] and details[0].startswith("case 'scale=3', seed ")


def test_the_changed_flags_give_the_same_settings_back() -> None:
    made = Settings(
        device="cpu",
        audit=False,
        checking=Checking(3, 7, 11, Tolerance(atol=0.0), case="spike", check_only=True),
        timing=Timing(rule=StopRule(min_samples=3, target_rse=0.1), graph=True, flush="write"),
        places=Places(results_dir=Path("elsewhere").resolve()),
    )
    flags = settings.changed_flags(made)
    assert "--atol" in flags and "--rtol" not in flags and "--graph" in flags
    assert flags[flags.index("--case") + 1] == "spike" and "--check-only" in flags
    args = run.parse_args(["--problem", "toy", *flags])
    assert settings.from_flags(args, device="cpu", arch="9.0", secret=11) == made
    assert settings.changed_flags(Settings()) == []


def test_a_shipped_problem_and_solution_are_replayed_by_name_and_path() -> None:
    source = resolve_problem("smooth_l1", REPO / "problems", REPO / "solutions")
    failed = replace(record("smooth_l1", "fast_cuda", status="rejected"), settings=Settings())
    solution = source.solutions[0]
    line = replay.command(failed, source, solution, "check", "default")
    assert line == (
        f"python run.py --problem smooth_l1 --solution {settings.typed(solution)} --case default "
        "--seed 42 --secret 0 --trials 5 --device cpu --check-only"
    )
    on_gpu = replace(failed, settings=Settings(device="cuda:0", timing=Timing(graph=True)))
    assert replay.command(on_gpu, source, solution, "time", "default") == (
        f"python run.py --problem smooth_l1 --solution {settings.typed(solution)} "
        "--seed 42 --secret 0 --trials 5 --graph"
    )
    assert replay.command(replace(failed, status="timeout"), source, solution, None, None) is None
    hung = replay.command(replace(failed, status="timeout"), source, solution, "check", "big")
    assert hung is not None and "--case big " in hung and hung.endswith("--check-only")


def test_a_hang_is_replayed_on_its_case_as_printed(cli: CliRun, capfd) -> None:
    hangs = ("--problem", str(TOY), "--solution", toy_solution("hangs"), "--device", "cpu")
    assert cli(*hangs, "--timeout", "3", "--trials", "1") == run.EXIT_FAILED
    detail = cli.record("hangs")["detail"]
    assert (
        detail == "check step ran past its 3 s limit in case 'default' (--timeout SECONDS sets it)"
    )
    (line,) = replay_lines(capfd.readouterr().err)
    assert "--case default" in line and "--timeout 3" in line and line.endswith("--check-only")
    assert run_replay(cli, line) == run.EXIT_FAILED
    assert cli.record("hangs")["detail"] == detail


def test_a_solution_may_be_named_by_its_stem() -> None:
    source = resolve_problem("smooth_l1", REPO / "problems", REPO / "solutions")
    assert given_solutions([Path("fast_cuda")], source) == [
        REPO / "solutions" / "smooth_l1" / "fast_cuda.py"
    ]
    with pytest.raises(UserError) as err:
        given_solutions([Path("fast_cud")], source)
    assert str(err.value) == (
        "--solution fast_cud: no such file, and problem 'smooth_l1' has no solution of that "
        "name; its solutions: fast_cuda, seed_cuda, triton_blocks, wide_cuda"
    )
    with pytest.raises(UserError, match=r"no such file$"):
        given_solutions([Path("nope.py")], ProblemSource("toy", TOY / "reference.py"))


@pytest.mark.parametrize(
    ("statuses", "said"),
    [
        (["incorrect"], "(nothing timed: no solution passed its checks)"),
        (["no_gpu"], "(nothing timed: its CUDA solutions need a GPU)"),
        (["no_gpu", "incorrect"], "(nothing timed: no solution passed its checks)"),
    ],
)
def test_a_timed_run_with_nothing_timed_says_why_not_that_it_only_checked(
    tmp_path: Path, statuses: list[str], said: str
) -> None:
    for k, verdict in enumerate(statuses):
        run_log.append(tmp_path, record("p", f"s{k}", status=verdict, run_id="20261130-1"))
    assert driving.run_line(tmp_path, "20261130-1").endswith(said)


def test_the_run_line_names_the_run_and_a_compare_command_that_runs_as_printed(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "a folder"  # a space: the printed command must quote it
    assert driving.run_line(folder, "20261130-000000-aaaaaa") == (
        "run 20261130-000000-aaaaaa: nothing recorded"
    )
    older, newer, checked = "20261129-100000-0ld0ld", "20261130-100000-4e54e5", "20261130-2"
    timed = [bench(10.0, 20.0)]
    run_log.append(folder, record("p", "a", timed, run_id=older))
    line = driving.run_line(folder, older)  # the first run: nothing to compare with yet
    assert (
        line == f"run {older}: results in {folder}/ (the first timed run of these solutions here)"
    )
    run_log.append(folder, record("q", "b", timed, run_id="20261129-200000-07he45"))  # not ours
    run_log.append(folder, record("p", "a", timed, run_id=newer))
    replayed = record("p", "a", run_id=checked)  # a check-only replay: no rows
    only = Settings(device="cuda:0", arch="9.0", checking=Checking(check_only=True))
    run_log.append(folder, replace(replayed, settings=only))
    assert driving.run_line(folder, checked).endswith("(checked only, no timings to compare)")
    line = driving.run_line(folder, newer)
    assert line.startswith(f"run {newer}: results in {folder}/ (compare with: python run.py ")
    command = shlex.split(line.rstrip(")").split("(compare with: ")[1])
    assert command[3:] == [f"{folder}@{older}", f"{folder}@{newer}"]
    assert run.main(command[2:]) == run.EXIT_OK
