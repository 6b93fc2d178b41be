"""The tolerance a run may set (--atol, --rtol) and the defaults by dtype: plain data,
importable without torch (so that `run.py -h` needs none); harness.matching applies it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# (atol, rtol) for a floating-point output, by the name of its dtype (torch.float32 -> float32)
DEFAULT_TOLERANCE = {
    "float64": (1e-7, 1e-7),
    "float32": (1e-4, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (2e-2, 2e-2),
}
FALLBACK_TOLERANCE = (1e-4, 1e-4)


@dataclass(frozen=True)
class Tolerance:
    """How far a floating-point output may stray: |actual - expected| <= atol + rtol * |expected|.

    A field left None takes the output dtype's default (DEFAULT_TOLERANCE); integer and bool
    outputs are always compared exactly.
    """

    atol: float | None = None
    rtol: float | None = None

    def for_dtype(self, dtype: Any) -> tuple[float, float]:
        """(atol, rtol) as applied to a floating-point tensor of `dtype` (a torch.dtype)."""
        name = str(dtype).removeprefix("torch.")
        default_atol, default_rtol = DEFAULT_TOLERANCE.get(name, FALLBACK_TOLERANCE)
        atol = default_atol if self.atol is None else self.atol
        rtol = default_rtol if self.rtol is None else self.rtol
        return atol, rtol
