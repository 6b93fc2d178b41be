"""The README and docs/ stay true: commands, statuses, paths and links match the tree."""

import re
import shlex

import pytest

import run
from harness import verdicts
from harness.loading import load_problem
from harness.run import flags
from harness.run.discovery import given_solutions, resolve_problem
from harness.run.driving import PROBLEMS_DIR, SOLUTIONS_DIR
from tests.conftest import REPO

README = (REPO / "README.md").read_text()
DOCS = sorted((REPO / "docs").glob("*.md"))
# Backquoted paths under these folders must exist: a doc that names a missing file is a bug.
TOP_FOLDERS = "problems|solutions|results|tests|harness|scripts|tuning|examples"
README_MAX_LINES = 250  # a guide read top to bottom; reference and measurements live in docs/
# A placeholder of a command that is a template: `<solution>`, `<gpu>`.
PLACEHOLDER = re.compile(r"<[A-Za-z][\w.-]*>")
SAVED_BY_THE_README = "my_smooth_l1.py"  # "save it as my_smooth_l1.py"
# Commands that only read what is recorded: run for real, not only parsed.
READ_ONLY = ("--compare", "--list")
# A markdown link's target: [text](target), without a title or an anchor.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s#]*)(?:#[^)\s]*)?\)")


def test_install_run_and_test_commands_are_the_ones_ci_runs() -> None:
    assert "pip install -r requirements.txt" in README
    assert "python run.py --problem multilabel_margin" in README
    ci = (REPO / ".ci" / "run").read_text()
    assert "pip install -r requirements.txt" in ci
    commands = [line.split("#")[0].strip() for line in README.splitlines()]
    command = next(line for line in commands if line.startswith("python -m pytest"))
    assert command in ci.splitlines(), f"CI does not run the README's test command: {command}"


def test_every_status_is_documented_with_its_meaning() -> None:
    for name, meaning in verdicts.MEANING.items():
        row = re.search(rf"^\| `{name}` \| (.+) \|$", README, re.MULTILINE)
        assert row, f"README has no row for status {name}"
        assert row.group(1).replace("`", "") == meaning


@pytest.mark.parametrize("page", [REPO / "README.md", *DOCS], ids=lambda p: p.name)
def test_files_the_readme_and_docs_name_exist(page) -> None:
    for path in re.findall(rf"`((?:{TOP_FOLDERS})/[\w./-]+)`", page.read_text()):
        if "<" not in path:
            assert (REPO / path).exists(), f"{page.name} names {path}"


def test_the_readme_links_to_docs_that_exist() -> None:
    targets = [t for t in LINK.findall(README) if t.startswith("docs/")]
    assert targets, "README links to no page of docs/"
    for target in targets:
        assert (REPO / target).is_file(), target


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = {REPO / t for t in LINK.findall(README)}
    assert DOCS and set(DOCS) <= linked, [p.name for p in DOCS if p not in linked]


@pytest.mark.parametrize("page", [REPO / "README.md", *DOCS], ids=lambda p: p.name)
def test_relative_links_point_to_files_that_exist(page) -> None:
    for target in LINK.findall(page.read_text()):
        if target and "://" not in target:
            assert (page.parent / target).exists(), f"{page.name} links to {target}"


def test_the_readme_stays_short() -> None:
    lines = len(README.splitlines())
    assert lines <= README_MAX_LINES, f"README has {lines} lines; move reference to docs/"


@pytest.mark.build
def test_the_first_solution_runs_as_written(tmp_path, cli) -> None:
    section = README[README.index("## Your first solution") : README.index("## What you get")]
    code = re.findall(r"```python\n(.*?)```", section, re.DOTALL)[0]  # then the Triton variant's
    (command,) = re.findall(r"```\n(python run\.py .*?)\n```", section)
    (tmp_path / "my_smooth_l1.py").write_text(code)
    words = shlex.split(command)
    assert words[:2] == ["python", "run.py"]
    words[words.index("my_smooth_l1.py")] = str(tmp_path / "my_smooth_l1.py")
    # Checked, not timed: a call at smooth_l1's sizes takes a second on a CPU (the timing path
    # runs in CI's timed CPU solution), and two trials a case.
    assert cli(*words[2:], "--check-only", "--trials", "2") == run.EXIT_OK
    record = cli.record("my_smooth_l1")
    assert record["status"] == "ok", record["detail"]
    cases = load_problem("smooth_l1", REPO / "problems" / "smooth_l1" / "reference.py").cases
    assert record["checks"] == 2 * len(cases)  # every case, twice


def test_the_triton_variant_is_the_shipped_solutions_own_code() -> None:
    section = README[README.index("**In Triton.**") : README.index("## What you get")]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    shipped = (REPO / "solutions" / "smooth_l1" / "triton_blocks.py").read_text()
    assert code in shipped and "solutions/smooth_l1/triton_blocks.py" in section


def commands(text: str, code_only: bool = True) -> list[str]:
    """Every command of `text`'s plain code blocks (or, without `code_only`, of each line that
    holds `python run.py`): what follows a `replay: ` of printed output, `&&` splitting two,
    comments and a description column (two spaces or more) dropped."""
    found = []
    for line in plain_code(text) if code_only else text.splitlines():
        line = line.split("replay: ", 1)[-1] if "replay: " in line else line
        if not code_only:
            if "python run.py" not in line:
                continue
            line = re.split(r"\s{2,}", line[line.index("python run.py") :])[0]
        if line.startswith(("[", "  log: ")):  # a line of a run's output
            continue
        found += [part.split(" # ")[0].strip() for part in line.split("&&") if part.strip()]
    return found


def check_runs_as_printed(command: str, explained: str | None, capsys) -> None:
    """A template names each placeholder where `explained` (the README's prose) says what goes
    there; any other command parses as run.py's flags and names what the clone holds."""
    words = shlex.split(command)
    placeholders = PLACEHOLDER.findall(command)
    if placeholders:
        for placeholder in placeholders:
            assert explained is None or f"`{placeholder}`" in explained, (command, placeholder)
        return
    if words[:2] == ["bash", words[1]] and words[0] == "bash":
        assert (REPO / words[1]).is_file(), command
    elif words[:3] == ["pip", "install", "-r"]:
        assert (REPO / words[3]).is_file(), command
    elif words[:2] == ["python", "run.py"]:
        args = flags.parse_args(words[2:])
        if any(flag in words for flag in READ_ONLY):
            assert run.main(words[2:]) == run.EXIT_OK, command
            capsys.readouterr()
        if args.problem:
            source = resolve_problem(args.problem, PROBLEMS_DIR, SOLUTIONS_DIR)
            named = [p for p in args.solution or [] if str(p) != SAVED_BY_THE_README]
            assert len(given_solutions(named, source)) == len(named)
            if args.forget:  # a solution the problem has, as a run here would have recorded
                assert args.forget in {p.stem for p in source.solutions}, command
        for folder in (args.problems, args.solutions):
            assert folder is None or folder.is_dir(), command
        if "tests/fixtures" in command:  # a test's fixture: nothing of it lands in the user's
            assert not args.recording, f"{command} records a fixture's rows in results/"
    else:
        assert words[0] in ("python", "python3", "."), f"not a command the test knows: {command}"


def plain_code(text: str) -> list[str]:
    """The lines of `text`'s code blocks that name no language (```python's are left out)."""
    lines, fence = [], None
    for line in text.splitlines():
        if line.startswith("```"):
            fence = line[3:] if fence is None else None
        elif fence == "":
            lines.append(line)
    return lines


def prose(text: str) -> str:
    """`text` without its code blocks."""
    kept, inside = [], False
    for line in text.splitlines():
        inside = not inside if line.startswith("```") else inside
        kept += [] if inside or line.startswith("```") else [line]
    return "\n".join(kept)


def test_the_readme_s_commands_run_as_printed_or_are_templates_it_explains(
    monkeypatch, capsys
) -> None:
    monkeypatch.chdir(REPO)
    found = commands(README)
    assert len(found) >= 14 and any(PLACEHOLDER.search(c) for c in found)
    for command in found:
        check_runs_as_printed(command, prose(README), capsys)


@pytest.mark.parametrize("where", ["run.py's docstring", "-h's examples"])
def test_the_examples_of_run_py_and_its_help_run_as_printed_or_are_templates(
    where: str, monkeypatch, capsys
) -> None:
    monkeypatch.chdir(REPO)
    text = run.__doc__ if where.startswith("run.py") else flags.DESCRIPTION
    found = commands(text or "", code_only=False)
    assert len(found) >= 4
    for command in found:
        check_runs_as_printed(command, None, capsys)


def test_the_command_check_refuses_a_placeholder_left_unsaid_and_a_missing_path(
    monkeypatch, capsys
) -> None:
    monkeypatch.chdir(REPO)
    with pytest.raises(AssertionError):
        check_runs_as_printed("python run.py --problem smooth_l1 --forget <mine>", "", capsys)
    with pytest.raises(SystemExit):
        check_runs_as_printed("python run.py --problem smooth_l1 --timeout -5", None, capsys)
    for missing in ("--problem nope", "--problem smooth_l1 --solution mine.py"):
        with pytest.raises(Exception, match=r"nope|mine\.py"):
            check_runs_as_printed(f"python run.py {missing}", None, capsys)
    with pytest.raises(AssertionError, match="--forget mine"):
        check_runs_as_printed("python run.py --problem smooth_l1 --forget mine", None, capsys)
    with pytest.raises(AssertionError, match="records a fixture"):
        check_runs_as_printed("python run.py --problem tests/fixtures/toy", None, capsys)
    with pytest.raises(AssertionError, match="nvidia-h100"):  # a folder no clone has
        check_runs_as_printed(
            "python run.py --compare results/nvidia-h100 results/cpu", None, capsys
        )
