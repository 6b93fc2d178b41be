"""Shared fixtures: the toy problem, its solutions, and a CLI runner writing to a temp folder."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

import run
from harness.settings import Places

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
TOY = FIXTURES / "toy"
TOY_SOLUTIONS = FIXTURES / "toy_solutions"
# The build cache of every test that does not need a cold one: run.py's own default (.cache/builds,
# or $HARNESS_BUILD_DIR), keyed by content and toolchain, so a test, run.py and CI's compile
# check share each build, within a run and across runs.
BUILDS = Places().build_dir
# Tests that need a fresh build folder still load PyTorch's precompiled header from BUILDS's
# (harness/measure/pch.py), instead of making it again: 70 s on CI's machine.
os.environ.setdefault("HARNESS_PCH_DIR", str(BUILDS / ".pch"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without a GPU the GPU tests are skipped; with pytest-xdist's workers side by side, the
    tests marked `alone` are (scripts/gpu_tests.sh runs them one at a time, after the rest)."""
    skips = {}
    if not torch.cuda.is_available():
        skips["gpu"] = pytest.mark.skip(reason="needs a CUDA device")
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
        reason = "must run with nothing beside it: bash scripts/gpu_tests.sh runs it alone"
        skips["alone"] = pytest.mark.skip(reason=reason)
    for item in items:
        for keyword, skip in skips.items():
            if keyword in item.keywords:
                item.add_marker(skip)


def toy_solution(name: str) -> str:
    return str(TOY_SOLUTIONS / f"{name}.py")


class CliRun:
    """Calls run.main with results, logs and builds kept under one temp folder."""

    def __init__(self, root: Path, build_dir: Path) -> None:
        self.root = root
        self.build_dir = build_dir

    def __call__(self, *args: str) -> int:
        return run.main(
            [
                *args,
                "--results-dir",
                str(self.root / "results"),
                "--log-dir",
                str(self.root / "logs"),
                "--build-dir",
                str(self.build_dir),
            ]
        )

    def records(self) -> list[dict]:
        logs = list((self.root / "results").glob("*/runs.jsonl"))
        return [json.loads(line) for log in logs for line in log.read_text().splitlines()]

    def record(self, solution: str) -> dict:
        matching = [r for r in self.records() if r["solution"] == solution]
        assert matching, f"no record for {solution}"
        return matching[-1]


@pytest.fixture
def cli(tmp_path: Path) -> CliRun:
    return CliRun(tmp_path, BUILDS)


@pytest.fixture(scope="module")
def module_cli(tmp_path_factory: pytest.TempPathFactory) -> CliRun:
    return CliRun(tmp_path_factory.mktemp("cli"), BUILDS)
