"""Notice a solution that replaces what the harness measures or judges with.

Before the solution is imported, the worker records the identity of every clock, CUDA timing
and synchronisation function, every comparison function of torch, and every function and class
of the harness's own modules. After the import, after the checks and after the timing, each must
still be the same object: a solution that swaps `torch.cuda.Event`, `torch.cuda.synchronize`,
`time.perf_counter`, `torch.allclose` or `harness.matching.mismatch` is rejected with reason
"timer_replaced" (or "harness_replaced"), naming what it replaced.

Attributes a module gains later are not checked (torch adds lazily imported submodules); only
replacements of what was there are.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import torch

from harness.measure import anticheat

# (object holding the attribute, its name for messages, the attributes to watch)
TIMERS: tuple[tuple[Any, str, tuple[str, ...]], ...] = (
    (time, "time", ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time")),
    (
        torch.cuda,
        "torch.cuda",
        (
            "Event",
            "synchronize",
            "current_stream",
            "set_stream",
            "Stream",
            "_sleep",
            "graph",
            "CUDAGraph",
        ),
    ),
    (torch.cuda.Event, "torch.cuda.Event", ("record", "elapsed_time", "synchronize", "query")),
    (torch.cuda.CUDAGraph, "torch.cuda.CUDAGraph", ("replay", "capture_begin", "capture_end")),
    (torch.cuda.Stream, "torch.cuda.Stream", ("synchronize", "wait_stream", "record_event")),
    (
        torch,
        "torch",
        ("isclose", "allclose", "equal", "isnan", "isfinite", "no_grad"),
    ),
    (
        torch.Tensor,
        "torch.Tensor",
        ("clone", "copy_", "to", "cpu", "detach", "view", "any", "all", "sum", "item", "__eq__"),
    ),
)
HARNESS_PREFIX = "harness"


class Snapshot:
    """The identities of the watched attributes at one moment."""

    def __init__(self) -> None:
        self.timers = {
            f"{label}.{name}": (holder, name, _current(holder, name))
            for holder, label, names in TIMERS
            for name in names
            if hasattr(holder, name)
        }
        self.harness = {
            f"{module_name}.{name}": (module, name, value)
            for module_name, module in _harness_modules()
            for name, value in vars(module).items()
            if callable(value) and not name.startswith("__")
        }

    def verify(self, when: str) -> None:
        """Raise a rejection naming the first watched attribute that was replaced."""
        for shown, (holder, name, original) in self.timers.items():
            if _current(holder, name) is not original:
                raise anticheat.reject(
                    "timer_replaced",
                    f"{shown} was replaced ({when}); a solution must not touch the "
                    "clocks, timers or comparisons the harness uses",
                )
        for shown, (module, name, original) in self.harness.items():
            if vars(module).get(name) is not original:
                raise anticheat.reject(
                    "harness_replaced",
                    f"{shown} was replaced ({when}): the harness is not the solution's to change",
                )


def _current(holder: Any, name: str) -> Any:
    # A class's own __dict__ entry, so a bound method's fresh wrapper object does not count.
    return vars(holder).get(name) if isinstance(holder, type) else getattr(holder, name, None)


def _harness_modules() -> list[tuple[str, Any]]:
    return [
        (name, module)
        for name, module in sorted(sys.modules.items())
        if module is not None and (name == HARNESS_PREFIX or name.startswith(HARNESS_PREFIX + "."))
    ]
