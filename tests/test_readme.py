"""The README and docs/ stay true: commands, statuses, paths and links match the tree."""

import re
import shlex

import pytest

import run
from harness import status
from harness.loading import load_problem
from tests.conftest import REPO

README = (REPO / "README.md").read_text()
DOCS = sorted((REPO / "docs").glob("*.md"))
# Backquoted paths under these folders must exist: a doc that names a missing file is a bug.
TOP_FOLDERS = "problems|solutions|results|tests|harness|scripts|tuning|examples"
README_MAX_LINES = 250  # a guide read top to bottom; reference and measurements live in docs/
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
    for name, meaning in status.MEANING.items():
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
    (code,) = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
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
