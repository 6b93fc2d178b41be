"""The README stays true: its commands, statuses and paths match the code."""

import re
import shlex

import pytest

import run
from harness import status
from tests.conftest import REPO

README = (REPO / "README.md").read_text()


def test_install_run_and_test_commands_are_the_ones_ci_runs() -> None:
    assert "pip install -r requirements.txt" in README
    assert "python run.py --problem multilabel_margin" in README
    assert "python -m pytest" in README
    ci = (REPO / ".ci" / "run").read_text()
    assert "pip install -r requirements.txt" in ci and "python -m pytest" in ci


def test_every_status_is_documented_with_its_meaning() -> None:
    for name, meaning in status.MEANING.items():
        row = re.search(rf"^\| `{name}` \| (.+) \|$", README, re.MULTILINE)
        assert row, f"README has no row for status {name}"
        assert row.group(1).replace("`", "") == meaning


def test_files_the_readme_names_exist() -> None:
    for path in re.findall(r"`((?:problems|solutions|results|tests|harness)/[\w./-]+)`", README):
        if "<" not in path:
            assert (REPO / path).exists(), path


@pytest.mark.build
def test_the_first_solution_runs_as_written(tmp_path, cli) -> None:
    section = README[README.index("## Your first solution") : README.index("## What you get")]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    (command,) = re.findall(r"```\n(python run\.py .*?)\n```", section)
    (tmp_path / "my_smooth_l1.py").write_text(code)
    words = shlex.split(command)
    assert words[:2] == ["python", "run.py"]
    words[words.index("my_smooth_l1.py")] = str(tmp_path / "my_smooth_l1.py")
    assert cli(*words[2:], "--max-samples", "3") == run.EXIT_OK
    record = cli.record("my_smooth_l1")
    assert record["status"] == "ok", record["detail"]
    assert record["checks"] >= 20 and record["benchmarks"]
