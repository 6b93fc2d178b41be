"""The mode a model runs in, and the modules whose meaning it changes.

Both models run in the mode their constructors leave them, as KernelBench runs them: an
`nn.Module` starts in training mode, so BatchNorm normalizes with the batch's own statistics
and Dropout zeroes elements at random. A problem meant for inference says so itself, by
calling `self.eval()` in `Model.__init__`; ModelNew is then put in the same mode
(harness.measure.checking.build_models). This module names the modules whose output depends
on that mode, for a verdict that must say why a solution differs, and those that draw random
numbers, for the audit's rule on random references (harness.measure.audit).
"""

from __future__ import annotations

from typing import Any

from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.dropout import _DropoutNd
from torch.nn.modules.instancenorm import _InstanceNorm


def _uses_running_stats(module: nn.Module) -> bool:
    """A norm whose eval() output uses running statistics, and training output the batch's."""
    return isinstance(module, (_BatchNorm, _InstanceNorm)) and bool(module.track_running_stats)


def _random(module: nn.Module) -> bool:
    """A module that draws random numbers in training mode."""
    if isinstance(module, _DropoutNd):
        return module.p > 0
    return isinstance(module, nn.RReLU)


def _named(model: Any, keep: Any) -> list[str]:
    if not isinstance(model, nn.Module):
        return []
    return [
        f"{type(module).__name__} at {name!r}"
        for name, module in model.named_modules()
        if name and module.training and keep(module)
    ]


def random_modules(model: Any) -> list[str]:
    """'Dropout at 'drop'' for each module of `model` that draws random numbers as it runs now
    (Dropout with p > 0, RReLU, in training mode)."""
    return _named(model, _random)


def mode_dependent(model: Any) -> list[str]:
    """Each module of `model` whose output would differ in eval(): norms that would use their
    running statistics, and random modules."""
    return _named(model, lambda m: _uses_running_stats(m) or _random(m))


def training_note(reference: Any) -> str:
    """Why a solution may differ from a reference in training mode, or '' when nothing in the
    reference depends on its mode."""
    named = mode_dependent(reference)
    if not named:
        return ""
    return (
        f"; the reference runs in training mode, as its constructor left it ({', '.join(named)}):"
        " norms use the batch's own statistics, not the running ones, and dropout is active; "
        "a problem meant for inference calls self.eval() in Model.__init__"
    )
