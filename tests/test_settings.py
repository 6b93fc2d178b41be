"""One settings object from the flags to the worker and the record, and one tolerance rule for
the checks, the spot checks of timed calls and the audit."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import run
from harness import codec, settings, verdicts
from harness.loading import load_problem
from harness.measure import audit, benchmarking
from harness.settings import Checking, Settings, StopRule, Timing
from harness.tolerance import Tolerance, allowed
from harness.verdicts import Verdict
from tests.conftest import TOY

CPU = torch.device("cpu")


def leaf_options(cls: type) -> list[str]:
    """The names of every option of `cls` and of the settings it holds."""
    names = []
    for f in dataclasses.fields(cls):
        if isinstance(f.default, Tolerance):
            names += ["atol", "rtol"]
        elif dataclasses.is_dataclass(f.default):
            names += leaf_options(type(f.default))
        else:
            names.append(f.name)
    return names


def test_every_option_has_a_flag_and_every_flag_reaches_the_settings() -> None:
    args = run.parse_args(["--problem", "toy"])
    assert set(leaf_options(Settings)) <= set(vars(args))
    given = run.parse_args(
        [
            "--problem",
            "toy",
            "--trials=3",
            "--seed=7",
            "--secret=11",
            "--atol=0.5",
            "--rtol=0.25",
            "--warmup-ms=1",
            "--min-samples=3",
            "--max-samples=9",
            "--target-rse=0.1",
            "--budget-ms=20",
            "--graph",
            "--flush=write",
            "--compile",
            "--no-baseline-cache",
            "--timeout=5",
            "--build-timeout=6",
            "--no-audit",
            "--arch=8.0",
            "--results-dir=r",
            "--build-dir=b",
            "--log-dir=l",
        ]
    )
    made = settings.from_flags(given, device="cpu")
    assert made.checking == Checking(3, 7, 11, Tolerance(0.5, 0.25))
    assert made.timing == Timing(StopRule(1.0, 3, 9, 0.1, 20.0), True, "write", True, False)
    assert (made.limits.run_s, made.limits.build_s) == (5.0, 6.0)
    assert made.audit is False and made.arch == "8.0" and made.device == "cpu"
    assert made.places.results_dir == Path("r").resolve()
    assert made.places.build_dir.is_absolute() and made.places.log_dir.is_absolute()


def test_the_defaults_of_the_flags_are_the_settings_defaults() -> None:
    args = run.parse_args(["--problem", "toy"])
    made = settings.from_flags(args, device="cpu", arch="9.0", secret=0)
    assert made == Settings()


def test_unresolved_values_are_resolved_once_by_run() -> None:
    args = run.parse_args(["--problem", "toy"])
    made = run.settings_for(args, None, None)
    assert made.device in ("cpu", "cuda:0")
    assert made.checking.secret > 0  # drawn: never 0, the public seeds
    assert (
        run.settings_for(
            run.parse_args(["--problem", "toy", "--secret", "0"]), None, None
        ).checking.secret
        == 0
    )


def test_settings_are_recorded_whole_and_read_back() -> None:
    made = Settings(
        device="cuda:0",
        checking=Checking(trials=2, secret=99, tolerance=Tolerance(atol=1e-3)),
        timing=Timing(rule=StopRule(min_samples=3), graph=True),
    )
    data = codec.encode(made)
    assert data["checking"]["tolerance"] == {"atol": 1e-3, "rtol": None}
    assert isinstance(data["places"]["results_dir"], str)
    assert codec.decode(Settings, data) == made


def test_the_flat_settings_of_older_records_still_read() -> None:
    old = {  # as records written before the settings object hold them
        "device": "cuda:0",
        "trials": 5,
        "seed": 42,
        "secret": 123,
        "rule": {"warmup_ms": 50.0, "min_samples": 10, "max_samples": 2000, "budget_ms": 2000.0},
        "graph": True,
        "flush": "write",
        "arch": "9.0",
        "reps": 100,  # older still: ignored
    }
    read = codec.decode(Settings, old)
    assert read.device == "cuda:0" and read.arch == "9.0"
    assert read.checking == Checking(5, 42, 123)
    assert read.timing.graph is True and read.timing.flush == "write"
    assert read.timing.rule == StopRule(50.0, 10, 2000, 0.005, 2000.0)


def test_impossible_values_are_refused_by_the_settings_themselves() -> None:
    with pytest.raises(ValueError, match="--trials"):
        Checking(trials=0)
    with pytest.raises(ValueError, match="--secret"):
        Checking(secret=-1)


def test_the_timing_mode_is_decided_in_one_place() -> None:
    assert Timing().mode("cpu") == "wall_clock"
    assert Timing(graph=True).mode("cpu") == "wall_clock"
    assert Timing().mode("cuda") == "cuda_events"
    assert Timing(graph=True).mode("cuda") == "cuda_graph"


# The tolerance rule ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def toy():
    return load_problem("toy", TOY / "reference.py")


def test_the_command_line_beats_the_case_which_beats_the_problem(toy) -> None:
    case = replace(toy.cases[0], atol=1e-2, rtol=None)
    problem = replace(toy, atol=1e-3, rtol=1e-5)
    assert allowed(problem, case, Tolerance()) == Tolerance(1e-2, 1e-5)
    assert allowed(problem, case, Tolerance(atol=0.5)) == Tolerance(0.5, 1e-5)
    assert allowed(toy, toy.cases[0], Tolerance()) == Tolerance(None, None)


class Reference(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 + 1


def spot_check(problem, case, override: Tolerance) -> None:
    """One spot check of a timed output that is off by 1e-3 everywhere."""
    settings_ = Settings(checking=Checking(tolerance=override))
    checker = benchmarking.spot_checker(problem, case, Reference(), CPU, settings_, "benchmark")
    x = torch.randn(8, 8, generator=torch.Generator().manual_seed(1))
    checker.check(x * 2 + 1 + 1e-3, [x], "timed call 1")


def test_a_case_tolerance_and_the_command_line_reach_the_spot_checks(toy) -> None:
    bench = toy.benchmarks[0]
    with pytest.raises(Verdict) as caught:
        spot_check(toy, bench, Tolerance())  # float32's default, 1e-4, is too tight
    assert caught.value.status == verdicts.INCORRECT
    assert "tolerance atol=0.0001" in caught.value.detail
    spot_check(toy, replace(bench, atol=1e-2), Tolerance())  # the case's own tolerance
    spot_check(toy, bench, Tolerance(atol=1e-2))  # --atol
    with pytest.raises(Verdict):  # --atol beats a looser case tolerance
        spot_check(toy, replace(bench, atol=1e-2), Tolerance(atol=1e-5, rtol=0.0))


def test_the_audit_judges_with_the_same_rule(toy) -> None:
    """A tolerance as wide as the outputs lets zeros pass: the audit must see --atol too."""
    assert all(f.level == audit.WARN for f in audit.audit_problem(toy, CPU))
    findings = audit.audit_problem(toy, CPU, Tolerance(atol=1e3))
    assert [f.check for f in findings if f.level == audit.WEAK] == ["zero_passes"]
    assert "atol=1000" in findings[0].message
