"""How close an output must come to the reference's: both rules, their tables and precedence.

The harness's rule (the default). A floating-point output passes where, element by element,
|actual - expected| <= atol + rtol * |expected|, NaN and infinities in the same places. (atol,
rtol) are the output dtype's (BY_DTYPE), unless set: by the command line (--atol, --rtol), else
by the case, else by the problem (ATOL, RTOL in its file); `allowed` says which, once, for the
checks, the spot checks of timed calls, the gradients, the compile baseline and the audit.
Where an output fails that, the float64 part may still pass it: its error against the reference
run in float64 within ACCURACY_MULTIPLE times the reference's own error against that answer, plus
ACCURACY_ULPS units in the last place (harness.accuracy applies it). Integer and bool outputs
are compared exactly.

KernelBench's rule (--as kernelbench): torch.allclose with atol = rtol from KernelBench's
precision table (KERNELBENCH_BY_DTYPE), or --kernelbench-tolerance; no float64 part
(harness.measure.kernelbench applies it).

Applied by harness.matching (the harness's rule), harness.accuracy (its float64 part) and
harness.measure.kernelbench (KernelBench's). Imports neither torch nor numpy: a dtype is named
by its torch name, `float32`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

BY_DTYPE = {  # the harness's (atol, rtol) for an output of each floating dtype
    "float64": (1e-7, 1e-7),
    "float32": (1e-4, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (2e-2, 2e-2),
}
OTHER_DTYPE = (1e-4, 1e-4)  # ... for any other floating dtype
ACCURACY_MULTIPLE = 32.0  # the float64 part: this many times the reference's own error ...
ACCURACY_ULPS = 2.0  # ... plus this many units in the last place of the exact answer
KERNELBENCH_BY_DTYPE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 1e-2}  # atol = rtol
KERNELBENCH_OTHER = 1e-4  # a floating dtype KernelBench's table lacks (it refuses those)


def dtype_name(dtype: Any) -> str:
    """`float32` for torch.float32 (or the string itself)."""
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class Tolerance:
    """The harness's rule's bounds: |actual - expected| <= atol + rtol * |expected|. A field
    left None takes the output dtype's (BY_DTYPE)."""

    atol: float | None = None
    rtol: float | None = None

    def for_dtype(self, dtype: Any) -> tuple[float, float]:
        """(atol, rtol) as applied to a floating-point output of `dtype` (a torch.dtype)."""
        default_atol, default_rtol = BY_DTYPE.get(dtype_name(dtype), OTHER_DTYPE)
        atol = default_atol if self.atol is None else self.atol
        rtol = default_rtol if self.rtol is None else self.rtol
        return atol, rtol


DTYPE_DEFAULT = Tolerance()  # each dtype's own bounds
EXACT = Tolerance(0.0, 0.0)


class SetsBounds(Protocol):
    """A problem or a case (harness.loading): the bounds its file sets, None where it does not."""

    @property
    def atol(self) -> float | None: ...

    @property
    def rtol(self) -> float | None: ...


def allowed(problem: SetsBounds, case: SetsBounds, given: Tolerance) -> Tolerance:
    """The harness's bounds for `case` of `problem`: each of atol and rtol the command line's
    (`given`), else the case's, else the problem's, else None (the output dtype's)."""
    return Tolerance(
        _first_set(given.atol, case.atol, problem.atol),
        _first_set(given.rtol, case.rtol, problem.rtol),
    )


def _first_set(*values: float | None) -> float | None:
    return next((v for v in values if v is not None), None)


def kernelbench(dtype: Any, given: float | None = None) -> float:
    """KernelBench's atol = rtol for an output of `dtype`: `given` (--kernelbench-tolerance),
    else its precision table's."""
    if given is not None:
        return given
    return KERNELBENCH_BY_DTYPE.get(dtype_name(dtype), KERNELBENCH_OTHER)
