"""The tolerance a run may set (--atol, --rtol): a plain pair, importable without torch (so
that `run.py -h` needs none); harness.matching applies it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Tolerance:
    """How far a floating-point output may stray: |actual - expected| <= atol + rtol * |expected|.

    A field left None takes the output dtype's default (harness.matching.DEFAULT_TOLERANCE);
    integer and bool outputs are always compared exactly.
    """

    atol: float | None = None
    rtol: float | None = None

    def for_dtype(self, dtype: Any) -> tuple[float, float]:
        """(atol, rtol) as applied to a floating-point tensor of `dtype` (a torch.dtype)."""
        from harness.matching import DEFAULT_TOLERANCE, FALLBACK_TOLERANCE

        default_atol, default_rtol = DEFAULT_TOLERANCE.get(dtype, FALLBACK_TOLERANCE)
        atol = default_atol if self.atol is None else self.atol
        rtol = default_rtol if self.rtol is None else self.rtol
        return atol, rtol

    def describe(self, output: Any) -> str:
        """The tolerance applied to `output`'s first floating-point tensor or number."""
        from harness.matching import describe_tolerance

        return describe_tolerance(self, output)
