"""What a result says about the machine and the code that produced it."""

from pathlib import Path

import torch

from harness.run.machine import describe, slug
from tests.conftest import REPO


def test_git_commit_names_the_code_when_set(monkeypatch) -> None:
    # A copy of the tree on a lent machine may carry a stale .git: the caller's word wins.
    monkeypatch.setenv("GIT_COMMIT", "25718c5")
    assert describe(torch.device("cpu"), REPO).commit == "25718c5"


def test_without_git_commit_the_checkout_is_read(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv("GIT_COMMIT", raising=False)
    assert describe(torch.device("cpu"), tmp_path).commit is None  # no checkout here
    info = describe(torch.device("cpu"), REPO)
    assert info.commit and slug(info) == "cpu"
