"""The README stays true: its commands, statuses and paths match the code."""

import re

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
