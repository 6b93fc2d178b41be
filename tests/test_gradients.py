"""Gradients judged for a problem with BACKWARD = True (harness.measure.gradients): every
floating-point input's and parameter's gradient, from a random upstream gradient, by the
forward's rule, named in the report."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F

from harness import status
from harness.errors import Verdict
from harness.loading import load_problem
from harness.measure.checking import check_cases
from harness.settings import Checking
from tests.conftest import REPO

LLTM = load_problem("lltm", REPO / "problems" / "lltm" / "reference.py")
Reference = LLTM.model


def judged(model_new: type) -> str:
    try:
        checks = check_cases(LLTM, model_new, torch.device("cpu"), Checking(trials=2, seed=3))
    except Verdict as verdict:
        return f"{verdict.status}: {verdict.detail}"
    return f"ok: {checks}"


class SameOps(Reference):  # autograd through the same operations, in another order
    def forward(self, input: Any, old_h: Any, old_cell: Any) -> Any:
        gates = F.linear(torch.cat([old_h, input], 1), self.weights, self.bias)
        i, o, c = gates.chunk(3, 1)
        new_cell = old_cell + torch.sigmoid(i) * F.elu(c)
        return torch.sigmoid(o) * torch.tanh(new_cell), new_cell


class Detached(Reference):
    def forward(self, input: Any, old_h: Any, old_cell: Any) -> Any:
        new_h, new_cell = super().forward(input, old_h, old_cell)
        return new_h.detach(), new_cell.detach()


class ScaledOldH(torch.autograd.Function):  # identity forward, a wrong backward
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad * 1.01


class WrongBackward(Reference):
    def forward(self, input: Any, old_h: Any, old_cell: Any) -> Any:
        return super().forward(input, ScaledOldH.apply(old_h), old_cell)


class Renamed(torch.nn.Module):
    def __init__(self, input_features: int, state_size: int) -> None:
        super().__init__()
        self.cell = Reference(input_features, state_size)

    def forward(self, *inputs: Any) -> Any:
        return self.cell(*inputs)


def test_the_same_function_by_other_operations_passes_forward_and_backward() -> None:
    assert judged(SameOps) == f"ok: {len(LLTM.cases) * 2}"


def test_detached_outputs_are_incorrect_with_the_reason() -> None:
    verdict = judged(Detached)
    assert verdict.startswith(f"{status.INCORRECT}: case 'default', seed ")
    assert "output 0 carries no gradient (detached, or made without autograd)" in verdict


def test_a_wrong_backward_names_the_tensor_whose_gradient_differs() -> None:
    verdict = judged(WrongBackward)
    assert verdict.startswith(f"{status.INCORRECT}: case 'default', seed ")
    assert "the gradient of old_h: " in verdict


def test_parameters_under_other_names_cannot_be_compared_and_say_so() -> None:
    verdict = judged(Renamed)
    assert verdict == (
        f"{status.INCORRECT}: ModelNew has no parameter 'weights' of shape [384, 160], so its "
        "gradient cannot be checked: name and shape the parameters as Model does"
    )


def test_without_backward_only_the_forward_is_judged() -> None:
    forward_only = dataclasses.replace(LLTM, backward=False)
    checking = Checking(trials=1, seed=3)
    assert check_cases(forward_only, WrongBackward, torch.device("cpu"), checking) == 4
    assert check_cases(forward_only, Detached, torch.device("cpu"), checking) == 4
