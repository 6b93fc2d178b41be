"""Cases marked invalid: the solution must refuse the input, and leave the device usable."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from harness import verdicts
from harness.loading import load_problem
from harness.measure import checking
from harness.measure.checking import Verdict, check_cases, check_refused
from harness.settings import Checking

CPU = torch.device("cpu")
INPUTS = [torch.tensor([1.0, -2.0, 3.0])]


class Raises(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("label 9 is out of range [-1, 3)")


class ReturnsNan(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, float]:
        return x.sum(), math.nan  # a NaN anywhere in the output counts


class ReturnsFinite(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.abs().sum()


@pytest.mark.parametrize("model", [Raises(), ReturnsNan()])
def test_raising_or_nan_is_a_refusal(model: Any) -> None:
    assert check_refused(model, INPUTS, CPU, "case 'bad'") is None


def test_an_expected_refusal_is_one_line_in_the_log_an_unexpected_error_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert check_refused(Raises(), INPUTS, CPU, "case 'bad'") is None
    logged = capsys.readouterr()
    assert (
        logged.out
        == "case 'bad': refused, as it should: ValueError: label 9 is out of range [-1, 3)\n"
    )
    assert "Traceback" not in logged.err
    with pytest.raises(Verdict):
        checking.guard(verdicts.RUNTIME_ERROR, "case 'good'", checking.call, Raises(), INPUTS, CPU)
    assert "Traceback" in capsys.readouterr().err


def test_a_finite_answer_to_invalid_input_is_incorrect() -> None:
    report = check_refused(ReturnsFinite(), INPUTS, CPU, "case 'bad'")
    assert report is not None and "returned finite values for invalid input" in report


def test_a_refusal_that_breaks_the_device_is_a_runtime_error(monkeypatch) -> None:
    def broken(device: torch.device) -> None:
        raise RuntimeError("CUDA error: device-side assert triggered")

    monkeypatch.setattr(checking, "probe", broken)
    with pytest.raises(Verdict) as err:
        check_refused(Raises(), INPUTS, CPU, "case 'bad'")
    assert err.value.status == verdicts.RUNTIME_ERROR
    assert "device is unusable after invalid input" in err.value.detail
    assert "device-side assert" in err.value.detail


PROBLEM = """
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        assert (x >= 0).all(), "the reference ran on invalid input"
        return x.sqrt()

def get_inputs():
    return [torch.rand(8)]

def get_init_inputs():
    return []

CASES = [{"name": "negative", "inputs": lambda: [-torch.rand(8)], "invalid": True}]
"""


class CheckedSqrt(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (x < 0).any():
            raise ValueError("sqrt of a negative number")
        return x.sqrt()


class UncheckedSqrt(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.abs().sqrt()  # right on valid input, silently wrong on invalid input


def test_invalid_cases_skip_the_reference_and_need_a_refusal(tmp_path) -> None:
    path = tmp_path / "sqrt.py"
    path.write_text(PROBLEM)
    problem = load_problem("sqrt", path)
    assert check_cases(problem, CheckedSqrt, CPU, Checking(trials=2, seed=0)) == 4
    with pytest.raises(Verdict) as err:
        check_cases(problem, UncheckedSqrt, CPU, Checking(trials=2, seed=0))
    assert err.value.status == verdicts.INCORRECT
    assert "case 'negative'" in err.value.detail
    assert "returned finite values for invalid input" in err.value.detail
