"""The backward of a problem that declares `BACKWARD = True` in its reference: for every case
and trial, the gradients of every floating-point input and of every parameter, from a fresh
random upstream gradient, judged by the forward's rule (harness.matching, with the reference's
exact answer from a float64 copy, harness.accuracy) and reported per tensor by name.

The gradients are a module's output (`Gradients`): the model run with autograd on fresh leaf
copies of the inputs, then backward from the upstream gradient. So the accuracy rule's float64
copy of the reference is a float64 copy of its whole backward, on the same upstream gradient
(drawn in float32 from the trial's seed and cast, so that both widths get the same values).
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import torch

from harness import accuracy, status
from harness.errors import Verdict
from harness.loading import Case, Problem
from harness.matching import leaves, mismatch, tolerance
from harness.tolerance import Tolerance


class Gradients(torch.nn.Module):
    """forward(*inputs) -> the gradients of `model` on `inputs`: of each floating-point input,
    then of each parameter in `params`, for the upstream gradient drawn from `seed`."""

    def __init__(self, model: Any, params: list[str], seed: int) -> None:
        super().__init__()
        self.model = model
        self.params = params
        self.seed = seed
        self.detached: list[int] = []  # outputs that did not require grad, by place

    def forward(self, *inputs: Any) -> tuple[Any, ...]:
        with torch.enable_grad():
            copies = [_leaf(value) for value in inputs]
            self.model.zero_grad(set_to_none=True)
            outputs = [o for o in leaves(self.model(*copies)) if _is_float(o)]
            self.detached = [i for i, o in enumerate(outputs) if not o.requires_grad]
            traced = [(i, o) for i, o in enumerate(outputs) if o.requires_grad]
            if traced:
                ups = [self._upstream(o, i) for i, o in traced]
                torch.autograd.backward([o for _, o in traced], ups)
            named = dict(self.model.named_parameters())
            grads = [c.grad for c in copies if _is_float(c)]
            return (*grads, *(named[name].grad for name in self.params))

    def _upstream(self, output: torch.Tensor, place: int) -> torch.Tensor:
        """The upstream gradient of the output at `place`: float32 draws from the seed, cast to
        the output's dtype, so a float64 copy of the model gets the same values."""
        generator = torch.Generator(device=output.device).manual_seed(self.seed + 7919 * place)
        draws = torch.randn(
            output.shape, generator=generator, device=output.device, dtype=torch.float32
        )
        return draws.to(output.dtype)


def check(
    problem: Problem,
    case: Case,
    models: tuple[Any, Any],
    inputs: list[Any],
    device: torch.device,
    override: Tolerance,
    seed: int,
) -> str | None:
    """None when the solution's gradients match the reference's on `inputs`, else the first
    mismatch, named ("the gradient of old_h: ..."); a solution whose outputs carry no
    gradient, or that lacks a parameter to compare, is `incorrect` with that reason."""
    reference, solution = models
    params = _comparable_params(reference, solution)
    names = [*_input_names(reference, inputs), *(f"parameter {p}" for p in params)]
    expected = Gradients(reference, params, seed)
    got = Gradients(solution, params, seed)
    wanted, given = expected(*inputs), got(*inputs)
    lost = sorted(set(got.detached) - set(expected.detached))
    if lost:
        return (
            f"output {lost[0]} carries no gradient (detached, or made without autograd): give it "
            "a backward (a torch.autograd.Function) or build it from differentiable ops"
        )
    for name, want, have in zip(names, wanted, given, strict=True):
        if want is not None and have is None:
            return f"no gradient for {name}: the solution's backward does not reach it"
    exact = accuracy.Exact(expected, inputs, device)
    report = mismatch(wanted, given, tolerance(problem, case, override), exact)
    return _named(report, names) if report else None


def _comparable_params(reference: Any, solution: Any) -> list[str]:
    """The reference's parameters that take a gradient, each of which the solution must have
    under the same name and shape (the weights copied to it were matched so, too)."""
    theirs = dict(solution.named_parameters())
    names = []
    for name, param in reference.named_parameters():
        if not param.requires_grad:
            continue
        mine = theirs.get(name)
        if mine is None or mine.shape != param.shape:
            raise Verdict(
                status.INCORRECT,
                f"ModelNew has no parameter {name!r} of shape {list(param.shape)}, so its "
                "gradient cannot be checked: name and shape the parameters as Model does",
            )
        names.append(name)
    return names


def _input_names(model: Any, inputs: list[Any]) -> list[str]:
    """The floating-point inputs by the names in the reference's forward, else by place."""
    try:
        given = list(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        given = []
    return [
        given[i] if i < len(given) else f"input {i}"
        for i, value in enumerate(inputs)
        if _is_float(value)
    ]


def _named(report: str, names: list[str]) -> str:
    """`report` with its place ("output[2]") given as the tensor's name."""
    found = re.match(r"output\[(\d+)\]", report)
    if not found:
        return report
    return f"the gradient of {names[int(found.group(1))]}" + report[found.end() :]


def _leaf(value: Any) -> Any:
    return value.detach().clone().requires_grad_(True) if _is_float(value) else value


def _is_float(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point()
