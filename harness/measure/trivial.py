"""The trivial answers a weak problem lets pass, as the audit (harness.measure.audit) builds and
reads them: zeros and a constant of an output's structure, shapes and dtypes, each an expanded
0-d tensor, so that no output-sized memory is held; and what the audit reads of an output (its
kind, whether it holds any value, its largest |value|, a block at a time)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from harness.blocks import blocks
from harness.matching import leaves


def supported(output: Any) -> bool:
    """Whether the audit can judge `output`: a tensor, a number, or a tuple or list of them."""
    if isinstance(output, (tuple, list)):
        return all(supported(item) for item in output)
    return isinstance(output, (torch.Tensor, bool, int, float))


def has_values(output: Any) -> bool:
    """False when `output` holds no element at all (every tensor empty): nothing to judge."""
    return any(not isinstance(leaf, torch.Tensor) or leaf.numel() > 0 for leaf in leaves(output))


def replace_leaves(output: Any, fn: Callable[[Any], Any]) -> Any:
    """`output` with the same structure, each tensor or number `x` replaced by `fn(x)`."""
    if isinstance(output, (tuple, list)):
        items = [replace_leaves(item, fn) for item in output]
        return items if isinstance(output, list) else tuple(items)
    return fn(output)


def zeros(output: Any) -> Any:
    """What a solution returning zeros would return: same structure, shapes and dtypes (each
    tensor one zero, expanded: it holds no memory of the output's size)."""
    return replace_leaves(
        output,
        lambda x: (
            torch.zeros((), dtype=x.dtype, device=x.device).expand(x.shape)
            if isinstance(x, torch.Tensor)
            else type(x)(0)
        ),
    )


def constant(output: Any) -> Any:
    """Each tensor as one value, 0-d: its mean if floating, its most common value if not."""
    return replace_leaves(output, fill)


def expanded(fills: Any, output: Any) -> Any:
    """`fills` (`constant`'s) expanded to `output`'s shapes, as a solution returning them
    would return (views: no memory of the output's size)."""
    if isinstance(output, (tuple, list)):
        items = [expanded(f, o) for f, o in zip(fills, output, strict=True)]
        return items if isinstance(output, list) else tuple(items)
    if isinstance(output, torch.Tensor) and output.numel() > 0:
        return fills.expand(output.shape)
    return fills


def fill(x: Any) -> Any:
    if not isinstance(x, torch.Tensor):
        return x  # a number is its own constant: whether it changes is judged across seeds
    if x.numel() == 0:
        return x.clone()
    if x.is_complex():
        return torch.full((), x.mean().item(), dtype=x.dtype, device=x.device)
    if x.is_floating_point():  # the mean in float64, a block at a time
        total = sum(x[index].to(torch.float64).sum().item() for index in blocks(x.shape))
        return torch.full((), total / x.numel(), dtype=x.dtype, device=x.device)
    values, counts = torch.unique(x, return_counts=True)
    return torch.full((), values[counts.argmax()].item(), dtype=x.dtype, device=x.device)


def first_values(output: Any) -> list[Any]:
    """The first element of each non-empty tensor, and each number: a fill's values."""
    return [
        leaf.flatten()[0].item() if isinstance(leaf, torch.Tensor) else leaf
        for leaf in leaves(output)
        if not isinstance(leaf, torch.Tensor) or leaf.numel() > 0
    ]


def format_value(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, (float, complex)) else str(value)


def max_abs(output: Any) -> float:
    """The largest finite |value| in `output` (0 when there is none), a block at a time."""
    peak = 0.0
    for leaf in leaves(output):
        x = leaf.detach() if isinstance(leaf, torch.Tensor) else torch.tensor(leaf)
        if x.is_complex():
            x = torch.view_as_real(x)
        for index in blocks(x.shape):
            values = x[index].to(torch.float64).abs()
            values = values[torch.isfinite(values)]
            if values.numel():
                peak = max(peak, values.max().item())
    return peak
