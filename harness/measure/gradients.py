"""The backward of a problem that declares `BACKWARD = True` in its reference: for every case
and trial, the gradients of every floating-point input and of every parameter, from a fresh
random upstream gradient, judged by the forward's rule (harness.matching, with the reference's
exact answer from a float64 copy, harness.accuracy) and reported per tensor by name.

The gradients are a module's output (`Gradients`): the model run with autograd on fresh leaf
copies of the inputs, then backward from the upstream gradient. So the accuracy rule's float64
copy of the reference is a float64 copy of its whole backward, on the same upstream gradient
(drawn in float32 from the trial's seed and cast, so that both widths get the same values).

The backward passes timed for a problem whose gradients are judged (`BACKWARD = True`).

Each benchmark of such a problem gets two more rows besides the forward's: "<name> backward"
and "<name> forward+backward". Both are timed like the forward (harness.measure.benchmarking:
the same flush, stopping rule, intervals, spot checks and wall-clock cross-check), on calls
whose inputs are the upstream gradients followed by the forward's inputs:

- `Training` runs the forward with autograd on the inputs, then the backward from the upstream
  gradients, and returns the gradients of every floating-point input and of every parameter:
  the forward+backward row, and the answer every backward is checked against (a module, so the
  accuracy rule's float64 copy of it is a float64 copy of the whole pass).
- `Backward` keeps, for each input set, the graph that one forward built (outside the timed
  region, retained), and each call runs only the backward through it.

The upstream gradients are drawn per input set from the benchmark's seed, and the feed changes
them before every call (harness.measure.feeding swaps two values of the first floating-point input,
which is the first upstream gradient): every call gets fresh upstream gradients.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import Any

import torch

from harness import accuracy, verdicts
from harness.loading import Case, Problem
from harness.matching import leaves, mismatch
from harness.measure import anticheat
from harness.tolerance import Tolerance, allowed
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
            outputs = float_outputs(self.model(*copies))
            self.detached = [i for i, o in enumerate(outputs) if not o.requires_grad]
            ups = upstream(outputs, self.seed)
            kept = [u.clone() for u in ups]
            grads = gradients(outputs, ups, wanted(self.model, copies, self.params))
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
    report = mismatch(wanted, given, allowed(problem, case, override), exact)
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
        if is_float(value)
    ]


def _named(report: str, names: list[str]) -> str:
    """`report` with its place ("output[2]") given as the tensor's name."""
    found = re.match(r"output\[(\d+)\]", report)
    if not found:
        return report
    return f"the gradient of {names[int(found.group(1))]}" + report[found.end() :]


def _leaf(value: Any) -> Any:
    """A leaf copy: a solution that writes to its input's storage cannot reach the caller's."""
    return value.detach().clone().requires_grad_(True) if is_float(value) else value


BACKWARD, BOTH = "backward", "forward+backward"
KINDS = (BACKWARD, BOTH)
OWN, AUTOGRAD, MIXED = "own", "autograd", "mixed"


def row_name(bench: str, kind: str) -> str:
    return f"{bench} {kind}"


def float_outputs(output: Any) -> list[torch.Tensor]:
    return [o for o in leaves(output) if is_float(o)]


def is_float(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point()


def upstream(output: Any, seed: int) -> list[torch.Tensor]:
    """One upstream gradient per floating-point output, standard normal, from `seed` (drawn in
    float32 and cast, so both widths of the accuracy rule get the same values)."""
    drawn = []
    for place, tensor in enumerate(float_outputs(output)):
        generator = torch.Generator(device=tensor.device).manual_seed(seed + 7919 * place)
        values = torch.randn(
            tensor.shape, generator=generator, device=tensor.device, dtype=torch.float32
        )
        drawn.append(values.to(tensor.dtype))
    return drawn


def gradients(
    outputs: list[torch.Tensor],
    ups: list[torch.Tensor],
    wanted: list[torch.Tensor],
    retain: bool = False,
) -> tuple[Any, ...]:
    """The gradients of `wanted` from `outputs` with `ups` (None where none reaches one); with
    `retain`, the graph is kept for another backward."""
    traced = [(o, u) for o, u in zip(outputs, ups, strict=True) if o.requires_grad]
    if not traced:
        return tuple(None for _ in wanted)
    return torch.autograd.grad(
        [o for o, _ in traced],
        wanted,
        [u for _, u in traced],
        retain_graph=retain,
        allow_unused=True,
    )


def wanted(model: Any, inputs: list[Any], params: list[str]) -> list[torch.Tensor]:
    """What takes a gradient: the floating-point `inputs`, then the model's `params` by name."""
    model = getattr(model, "_orig_mod", model)  # a torch.compile'd module: the one it wraps
    named = dict(model.named_parameters()) if isinstance(model, torch.nn.Module) else {}
    return [v for v in inputs if is_float(v)] + [named[name] for name in params]


def param_names(model: Any) -> list[str]:
    """The names of the parameters of `model` that take a gradient."""
    if not isinstance(model, torch.nn.Module):
        return []
    return [name for name, p in model.named_parameters() if p.requires_grad]


class Training(torch.nn.Module):
    """forward(*ups, *inputs) -> the gradients of `model` on `inputs` for the upstream gradients
    `ups` (`count` of them): of each floating-point input, then of each parameter in `params`."""

    def __init__(self, model: Any, count: int, params: list[str]) -> None:
        super().__init__()
        self.model = model
        self.count = count
        self.params = params

    def forward(self, *args: Any) -> tuple[Any, ...]:
        ups, inputs = list(args[: self.count]), args[self.count :]
        with torch.enable_grad():
            copies = [_leaf_in_place(v) for v in inputs]
            outputs = float_outputs(self.model(*copies))
            return gradients(outputs, ups, wanted(self.model, copies, self.params))


class Backward:
    """call(*ups, *inputs) -> what Training gives, from the graph one forward built on these
    very input tensors when this was made (one graph per set in `sets`)."""

    def __init__(self, model: Any, count: int, params: list[str], sets: list[list[Any]]) -> None:
        self.count = count
        self.graphs: dict[tuple[int, ...], tuple[list[torch.Tensor], list[torch.Tensor]]] = {}
        with torch.enable_grad():
            for values in sets:
                copies = [_leaf_in_place(v) for v in values[count:]]
                outputs = float_outputs(model(*copies))
                self.graphs[_key(values[count:])] = (outputs, wanted(model, copies, params))

    def __call__(self, *args: Any) -> tuple[Any, ...]:
        outputs, taking = self.graphs[_key(args[self.count :])]
        return gradients(outputs, list(args[: self.count]), taking, retain=True)


def backward_by(model: Any, inputs: list[Any]) -> str:
    """Who wrote the model's backward: OWN (every path from its outputs to its inputs runs
    through a torch.autograd.Function of its own), AUTOGRAD (PyTorch differentiates the
    operations of its forward; none is its own Function) or MIXED."""
    with torch.enable_grad():
        copies = [_leaf_in_place(v) for v in inputs]
        outputs = float_outputs(model(*copies))
    own = builtin = False
    seen: set[int] = set()
    stack = [o.grad_fn for o in outputs if o.grad_fn is not None]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, torch.autograd.function.BackwardCFunction):
            own = True
            continue  # what lies behind its own Function is its own business
        if type(node).__name__ != "AccumulateGrad":
            builtin = True
        stack += [n for n, _ in node.next_functions if n is not None]
    if own:
        return MIXED if builtin else OWN
    return AUTOGRAD


def described(by: str) -> str | None:
    """The row's note on who computes the backward, or None when it is the solution's own."""
    if by == AUTOGRAD:
        return "backward: PyTorch autograd through the solution's forward (no backward of its own)"
    if by == MIXED:
        return "backward: partly PyTorch autograd through the solution's forward"
    return None


def _leaf_in_place(value: Any) -> Any:
    """The forward's input as a leaf that takes a gradient: the same storage, no copy."""
    return value.detach().requires_grad_(True) if is_float(value) else value


def _key(inputs: Any) -> tuple[int, ...]:
    return tuple(id(v) for v in inputs)


@dataclass(frozen=True)
class Pass:
    """One backward kind of a benchmark, as the sampler needs it: how to make an input set
    (upstream gradients shaped like the reference's `output`, then the forward's inputs) and
    how to wrap a model into the call that times it."""

    kind: str
    output: Any  # the reference's forward output on the benchmark: the upstream shapes
    params: list[str]

    @property
    def count(self) -> int:
        return len(float_outputs(self.output))

    def extend(self, inputs: list[Any], seed: int) -> list[Any]:
        return [*upstream(self.output, seed), *inputs]

    def wrap(self, model: Any, sets: list[list[Any]]) -> Any:
        if self.kind == BACKWARD:
            return Backward(model, self.count, self.params, sets)
        return Training(model, self.count, self.params)
