"""The backward passes timed for a problem whose gradients are judged (`BACKWARD = True`).

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
them before every call (harness.feeding swaps two values of the first floating-point input,
which is the first upstream gradient): every call gets fresh upstream gradients.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from harness.matching import leaves

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
            copies = [_leaf(v) for v in inputs]
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
                copies = [_leaf(v) for v in values[count:]]
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
        copies = [_leaf(v) for v in inputs]
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


def _leaf(value: Any) -> Any:
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
