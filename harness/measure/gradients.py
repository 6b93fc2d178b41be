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

from harness import accuracy, verdicts
from harness.loading import Case, Problem
from harness.matching import mismatch, tolerance
from harness.measure import anticheat, passes
from harness.tolerance import Tolerance
from harness.verdicts import Verdict


class Gradients(torch.nn.Module):
    """forward(*inputs) -> the gradients of `model` on `inputs`: of each floating-point input,
    then of each parameter in `params`, for the upstream gradients drawn from `seed`."""

    def __init__(self, model: Any, params: list[str], seed: int) -> None:
        super().__init__()
        self.model = model
        self.params = params
        self.seed = seed
        self.detached: list[int] = []  # outputs that did not require grad, by place
        self.mutated: list[int] = []  # outputs whose upstream gradient the backward changed

    def forward(self, *inputs: Any) -> tuple[Any, ...]:
        with torch.enable_grad():
            copies = [_leaf(value) for value in inputs]
            outputs = passes.float_outputs(self.model(*copies))
            self.detached = [i for i, o in enumerate(outputs) if not o.requires_grad]
            ups = passes.upstream(outputs, self.seed)
            kept = [u.clone() for u in ups]
            grads = passes.gradients(outputs, ups, passes.wanted(self.model, copies, self.params))
            changed = [not torch.equal(u, k) for u, k in zip(ups, kept, strict=True)]
            self.mutated = [i for i, c in enumerate(changed) if c]
            return grads


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
    params = comparable_params(reference, solution)
    names = [*_input_names(reference, inputs), *(f"parameter {p}" for p in params)]
    expected = Gradients(reference, params, seed)
    got = Gradients(solution, params, seed)
    wanted, given = expected(*inputs), got(*inputs)
    if got.mutated:
        raise anticheat.reject(
            "input_mutated",
            f"its backward wrote to the upstream gradient of output {got.mutated[0]}: a "
            "backward must leave the gradients it is given unchanged (write to a new tensor)",
        )
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


def comparable_params(reference: Any, solution: Any) -> list[str]:
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
                verdicts.INCORRECT,
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
        if passes.is_float(value)
    ]


def _named(report: str, names: list[str]) -> str:
    """`report` with its place ("output[2]") given as the tensor's name."""
    found = re.match(r"output\[(\d+)\]", report)
    if not found:
        return report
    return f"the gradient of {names[int(found.group(1))]}" + report[found.end() :]


def _leaf(value: Any) -> Any:
    """A leaf copy: a solution that writes to its input's storage cannot reach the caller's."""
    return value.detach().clone().requires_grad_(True) if passes.is_float(value) else value
