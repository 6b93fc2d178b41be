"""Gradients judged for a problem with BACKWARD = True (harness.measure.gradients): every
floating-point input's and parameter's gradient, from a random upstream gradient, by the
forward's rule, named in the report."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from harness import verdicts
from harness.loading import Case, import_file, load_problem
from harness.measure.benchmarking import time_benchmarks
from harness.measure.checking import check_cases
from harness.record import BenchRow
from harness.settings import Checking, Settings, StopRule, Timing
from harness.verdicts import Verdict
from tests.conftest import REPO

LLTM = load_problem("lltm", REPO / "problems" / "lltm" / "reference.py")
Reference = LLTM.model
cell_inputs = import_file(LLTM.path).cell_inputs


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
    assert verdict.startswith(f"{verdicts.INCORRECT}: case 'default', seed ")
    assert "output 0 carries no gradient (detached, or made without autograd)" in verdict


def test_a_wrong_backward_names_the_tensor_whose_gradient_differs() -> None:
    verdict = judged(WrongBackward)
    assert verdict.startswith(f"{verdicts.INCORRECT}: case 'default', seed ")
    assert "the gradient of old_h: " in verdict


def test_parameters_under_other_names_cannot_be_compared_and_say_so() -> None:
    verdict = judged(Renamed)
    assert verdict == (
        f"{verdicts.INCORRECT}: ModelNew has no parameter 'weights' of shape [384, 160], so its "
        "gradient cannot be checked: name and shape the parameters as Model does"
    )


def test_without_backward_only_the_forward_is_judged() -> None:
    forward_only = dataclasses.replace(LLTM, backward=False)
    checking = Checking(trials=1, seed=3)
    assert check_cases(forward_only, WrongBackward, torch.device("cpu"), checking) == 4
    assert check_cases(forward_only, Detached, torch.device("cpu"), checking) == 4


SMALL = dataclasses.replace(
    LLTM, benchmarks=(Case("small", lambda: [4, 8], lambda: cell_inputs(6, 4, 8)),)
)
QUICK = Settings(device="cpu", timing=Timing(rule=StopRule(min_samples=3, max_samples=3)))


class OwnCell(torch.autograd.Function):  # the cell with a hand-written backward, in Python
    @staticmethod
    def forward(ctx: Any, x: Any, weights: Any, bias: Any, old_cell: Any) -> Any:
        ctx.save_for_backward(x, weights, bias, old_cell)
        with torch.enable_grad():
            return _cell(x, weights, bias, old_cell)

    @staticmethod
    def backward(ctx: Any, grad_h: Any, grad_cell: Any) -> Any:
        saved = [t.detach().requires_grad_(True) for t in ctx.saved_tensors]
        with torch.enable_grad():
            outputs = _cell(*saved)
            return torch.autograd.grad(outputs, saved, (grad_h, grad_cell))


def _cell(x: Any, weights: Any, bias: Any, old_cell: Any) -> tuple[Any, Any]:
    i, o, c = F.linear(x, weights, bias).chunk(3, 1)
    new_cell = old_cell + torch.sigmoid(i) * F.elu(c)
    return torch.tanh(new_cell) * torch.sigmoid(o), new_cell


class OwnBackward(Reference):
    def forward(self, input: Any, old_h: Any, old_cell: Any) -> Any:
        x = torch.cat([old_h, input], 1)
        return OwnCell.apply(x, self.weights, self.bias, old_cell)


class StaleBackward(torch.autograd.Function):  # its first backward's answer, ever after
    kept: ClassVar[list[Any]] = []

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        if not StaleBackward.kept or StaleBackward.kept[0].shape != grad.shape:
            StaleBackward.kept[:] = [grad.clone()]
        return StaleBackward.kept[0]


class Stale(Reference):
    def forward(self, input: Any, old_h: Any, old_cell: Any) -> Any:
        new_h, new_cell = super().forward(input, old_h, old_cell)
        return new_h, StaleBackward.apply(new_cell)


class ScribbleBackward(torch.autograd.Function):  # a right answer, its upstream overwritten
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        answer = grad.clone()
        grad.zero_()
        return answer


class Scribbles(Reference):
    def forward(self, input: Any, old_h: Any, old_cell: Any) -> Any:
        new_h, new_cell = super().forward(input, old_h, old_cell)
        return ScribbleBackward.apply(new_h), new_cell


def timed(model_new: type) -> list[BenchRow] | str:
    try:
        return time_benchmarks(SMALL, model_new, torch.device("cpu"), QUICK)
    except Verdict as verdict:
        return f"{verdict.status}: {verdict.detail}"


def test_backward_and_forward_backward_are_rows_of_their_own_with_who_wrote_the_backward() -> None:
    by_autograd, by_own = timed(SameOps), timed(OwnBackward)
    assert not isinstance(by_autograd, str) and not isinstance(by_own, str)
    names = ["small", "small backward", "small forward+backward"]
    assert [r.name for r in by_autograd] == names == [r.name for r in by_own]
    for row in by_autograd + by_own:
        assert row.solution.median_us > 0 and row.reference.median_us > 0
        assert row.speedup is not None
        assert 0 < row.speedup.low <= row.speedup.value <= row.speedup.high
    autograd_note = "backward: PyTorch autograd through the solution's forward"
    assert [autograd_note in (r.note or "") for r in by_autograd] == [False, True, True]
    assert not any(r.note for r in by_own)
    forward, backward, both = by_autograd  # each pass has its own speed-of-light work
    assert forward.flops and backward.flops and both.flops == forward.flops + backward.flops
    assert forward.bytes and backward.bytes and both.bytes > backward.bytes


def test_a_backward_that_keeps_its_first_answer_is_caught_on_fresh_upstream_gradients() -> None:
    StaleBackward.kept.clear()
    verdict = timed(Stale)
    assert isinstance(verdict, str)
    assert verdict.startswith(f"{verdicts.INCORRECT}: benchmark 'small"), verdict


def test_a_backward_that_writes_to_its_upstream_gradient_is_rejected() -> None:
    verdict = timed(Scribbles)
    assert isinstance(verdict, str)
    assert verdict.startswith("rejected: ") and "[rule: input_mutated]" in verdict, verdict
    assert "its backward wrote to the upstream gradient of output 0" in verdict
