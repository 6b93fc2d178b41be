"""Keeping results tidy and true: --forget drops a solution's rows while runs.jsonl stays
append-only, --no-record writes nothing under the results folder, a run or an audit stopped by
a broken problem says so with exit 3 and claims no summary, and --render lists every file it
rewrote."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import run
from harness import record
from harness.record import LOG_NAME
from harness.results import chart, rendering
from harness.settings import REPO
from tests import records_factory as make
from tests.conftest import FIXTURES, TOY, CliRun, toy_solution

QUICK = ["--device", "cpu", "--max-samples", "5", "--trials", "2", "--timeout", "60"]
BROKEN = str(FIXTURES / "faults" / "problem_no_get_inputs.py")
LATER = "2026-11-29T11:00:00+00:00"


def has_row(table: str, solution: str) -> bool:
    return bool(re.search(rf"^\| {solution} +\| ", table, re.MULTILINE))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A machine's results folder: problem p with solutions fast and slow, rendered."""
    where = tmp_path / "results" / "nvidia-h200"
    record.append(where, make.record("p", "fast", [make.bench(10, 30)]))
    record.append(where, make.record("p", "slow", [make.bench(40, 30)]))
    rendering.render_folder(where)
    return where


def forget(folder: Path, solution: str, problem: str = "p") -> int:
    where = ["--results-dir", str(folder.parent), "--machine-folder", folder.name]
    return run.main(["--problem", problem, "--forget", solution, *where])


def digests(folder: Path) -> dict[str, int]:
    return {p.name: hash(p.read_bytes()) for p in sorted(folder.iterdir())}


def test_forget_appends_a_removal_line_that_the_reader_honours(tmp_path: Path) -> None:
    kept, other_problem = make.record("p", "b"), make.record("q", "a")
    for recorded in (make.record("p", "a"), kept, other_problem):
        record.append(tmp_path, recorded)
    log = tmp_path / LOG_NAME
    before = log.read_text()
    assert record.forget(tmp_path, "p", "a") == ["solutions/p/a.py"]
    assert log.read_text().startswith(before)  # append-only: no line changed
    assert record.read(tmp_path) == [kept, other_problem]
    rerun = make.record("p", "a", when=LATER)
    record.append(tmp_path, rerun)
    assert record.read(tmp_path) == [kept, other_problem, rerun]  # a later run shows again


def test_forget_takes_a_path_as_recorded_or_as_a_file_and_nothing_else(tmp_path: Path) -> None:
    for solution in ("a", "b", "c"):
        record.append(tmp_path, make.record("p", solution))
    assert record.forget(tmp_path, "p", "solutions/p/a.py") == ["solutions/p/a.py"]
    assert record.forget(tmp_path, "p", str(REPO / "solutions/p/b.py")) == ["solutions/p/b.py"]
    assert record.forget(tmp_path, "p", "nope") == []
    assert record.forget(tmp_path, "q", "c") == []  # another problem's name
    assert [r.solution for r in record.read(tmp_path)] == ["c"]


def test_forget_drops_the_rows_and_re_renders(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert forget(folder, "slow") == run.EXIT_OK
    out = capsys.readouterr().out
    said = f"forgetting slow of p in {folder} (named by --machine-folder)\n"
    assert out.startswith(said)  # said before anything is written
    assert f"forgot slow of p in {folder}; rewrote: p.md, p.csv" in out and "summary.md" in out
    table = (folder / "p.md").read_text()
    assert has_row(table, "fast") and not has_row(table, "slow")
    assert "slow" not in (folder / "p.csv").read_text()
    assert "slow" not in (folder / "summary.md").read_text()
    assert len((folder / LOG_NAME).read_text().splitlines()) == 3  # both records, one removal


def test_forgetting_a_problem_s_last_solution_removes_its_tables(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (folder / "p.svg").write_text("<svg/>\n")  # as if drawn where matplotlib is installed
    assert forget(folder, "slow") == run.EXIT_OK
    capsys.readouterr()
    assert forget(folder, "fast") == run.EXIT_OK
    assert not [p.name for p in folder.glob("p.*")]
    out = capsys.readouterr().out  # says what it removed, not only what it rewrote
    assert out.strip().endswith("rewrote: summary.md; removed: p.md, p.csv, p.svg")
    assert "| p " not in (folder / "summary.md").read_text()


def test_forgetting_what_is_not_there_is_one_line_with_exit_3(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = (folder / LOG_NAME).read_text()
    assert forget(folder, "slwo") == run.EXIT_INPUT
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: --forget slwo: no rows of it")
    assert "recorded there: fast, slow" in err
    assert (folder / LOG_NAME).read_text() == log


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--all", "--forget", "x"], "--forget needs --problem"),
        (["--problem", "p", "--forget", "x", "--solution", "x.py"], "takes no --solution"),
        (["--render", "--no-record"], "not --render"),
        (["--compare", "a", "b", "--no-record"], "not --compare"),
        (["--list", "--no-record"], "not --list"),
        (["--problems", "d", "--no-record"], "not --problems"),
        (["--problem", "p", "--audit", "--no-record"], "not --audit"),
        (["--problem", "p", "--forget", "x", "--no-record"], "not --forget"),
    ],
)
def test_forget_and_no_record_refuse_what_they_cannot_go_with_naming_it(
    args: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        run.main(args)
    assert exit_.value.code == run.EXIT_USAGE
    assert said in capsys.readouterr().err.strip().splitlines()[-1]


def test_a_solution_chart_is_removed_once_no_solution_is_ok(tmp_path: Path) -> None:
    record.append(tmp_path, make.record("p", "a", status="incorrect"))
    (tmp_path / "p.svg").write_text("<svg/>\n")
    assert chart.write_chart(tmp_path, "p", record.read(tmp_path)) is None
    assert not (tmp_path / "p.svg").exists()


def test_render_lists_every_file_it_rewrote(
    folder: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chart, "render_svg", lambda *args: "<svg/>\n")  # without matplotlib
    where = ["--results-dir", str(folder.parent), "--machine-folder", folder.name]
    assert run.main(["--render", *where]) == run.EXIT_OK
    out = capsys.readouterr().out
    assert out.startswith(f"rendering {folder} (named by --machine-folder)\n")
    assert f"rendered {folder}: p.md, p.csv, p.svg, summary.md" in out


def test_render_and_forget_on_a_cpu_leave_another_machine_s_folder_alone(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = digests(folder)
    results = ["--results-dir", str(folder.parent), "--device", "cpu"]
    assert run.main(["--problem", "p", "--forget", "slow", *results]) == run.EXIT_INPUT
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"in {folder.parent / 'cpu'} (this machine's" in err
    assert err.endswith(
        "it has rows in nvidia-h200: add --machine-folder nvidia-h200 to forget them there"
    )
    assert run.main(["--render", *results]) == run.EXIT_INPUT
    err = capsys.readouterr().err.strip()
    assert (
        "--render: no recorded runs in" in err and "recorded under" in err and "nvidia-h200" in err
    )
    own = folder.parent / "cpu"
    record.append(own, make.record("p", "slow"))
    assert run.main(["--problem", "p", "--forget", "slow", *results]) == run.EXIT_OK
    assert run.main(["--render", *results]) == run.EXIT_OK
    out = capsys.readouterr().out
    assert f"forgetting slow of p in {own} (this machine's folder;" in out
    assert f"rendering {own} (this machine's folder;" in out
    assert digests(folder) == before  # not a byte of nvidia-h200 changed


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--problem", "p", "--machine-folder", "cpu"], "goes with --render or --forget"),
        (["--render", "--machine-folder", "results/cpu"], "not a path"),
        (["--render", "--machine-folder", ".."], "name a folder"),
    ],
)
def test_machine_folder_takes_a_name_and_goes_with_render_or_forget(
    args: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        run.main(args)
    assert exit_.value.code == run.EXIT_USAGE
    assert said in capsys.readouterr().err


def test_no_record_prints_the_verdicts_and_writes_no_results(
    cli: CliRun, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--problem", str(TOY), "--solution", toy_solution("good"), "--no-record", *QUICK]
    assert cli(*args) == run.EXIT_OK
    out = capsys.readouterr().out
    rows = [line.split()[:3] for line in out.splitlines() if line.startswith("good ")]
    assert rows and all(row[2] == "ok" for row in rows) and "not recorded (--no-record)" in out
    assert "written:" not in out
    assert not (cli.root / "results").exists()
    assert list(cli.root.glob("logs/*/01-toy--good.log"))  # the worker's log is still kept


def test_a_broken_problem_exits_3_in_an_audit_as_in_a_run(
    cli: CliRun, capfd: pytest.CaptureFixture[str]
) -> None:
    assert cli("--audit", "--problem", BROKEN, "--device", "cpu") == run.EXIT_INPUT
    assert cli("--problem", BROKEN, "--solution", toy_solution("good"), *QUICK) == run.EXIT_INPUT
    for said in capfd.readouterr().err.strip().splitlines():
        assert said.startswith("error: ") and "is not a KernelBench problem" in said, said


def test_a_run_stopped_by_a_broken_problem_claims_no_summary(
    cli: CliRun, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli("--problem", str(TOY), "--solution", toy_solution("good"), *QUICK) == run.EXIT_OK
    (summary,) = cli.root.glob("results/*/summary.md")
    written = summary.stat().st_mtime_ns
    capsys.readouterr()
    assert cli("--problem", BROKEN, "--solution", toy_solution("good"), *QUICK) == run.EXIT_INPUT
    assert "written:" not in capsys.readouterr().out
    assert summary.stat().st_mtime_ns == written
