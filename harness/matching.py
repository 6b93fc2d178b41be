"""Decide whether a solution's output matches the reference's, and say where it does not.

Outputs may be a tensor, a Python number, or a (nested) tuple or list of them. Each tensor must
match in type, shape, dtype and device; integer and bool tensors must be equal exactly; for
floating-point tensors NaN and infinity must sit at the same places (with the same sign) and the
finite values must satisfy |actual - expected| <= atol + rtol * |expected|, or, where given the
reference's exact answer (`exact`, run in float64 only when that fails), keep the accuracy rule
of harness.accuracy: an error against the exact answer within a multiple of the reference's own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from harness import accuracy
from harness.loading import Case, Problem
from harness.tolerance import Tolerance

# Default tolerances by output dtype, used when neither the problem nor the case gives one.
SHOWN_ELEMENTS = 5  # how many mismatching elements a report names


def tolerance(problem: Problem, case: Case, override: Tolerance) -> Tolerance:
    """The one precedence rule, for the checks, the spot checks of timed calls and the audit:
    each of atol and rtol is the command line's (`override`), else the case's, else the problem's,
    else None (the output dtype's default)."""
    return Tolerance(
        _first_set(override.atol, case.atol, problem.atol),
        _first_set(override.rtol, case.rtol, problem.rtol),
    )


def _first_set(*values: float | None) -> float | None:
    return next((v for v in values if v is not None), None)


def describe_tolerance(tolerance: Tolerance, output: Any) -> str:
    """The tolerance applied to `output`'s first floating-point tensor or number."""
    for leaf in leaves(output):
        x = leaf if isinstance(leaf, torch.Tensor) else torch.tensor(leaf)
        if x.is_floating_point() or x.is_complex():
            atol, rtol = tolerance.for_dtype(x.dtype.to_real() if x.is_complex() else x.dtype)
            return f"atol={atol:g} rtol={rtol:g}"
    return "exact equality"


def leaves(output: Any) -> list[Any]:
    """The tensors and numbers in `output` (a nested tuple or list of them), in order."""
    if isinstance(output, (tuple, list)):
        return [leaf for item in output for leaf in leaves(item)]
    return [output]


DTYPE_DEFAULT = Tolerance()  # each dtype's own default
EXACT = Tolerance(0.0, 0.0)


Answer = Callable[[], accuracy.Wide]  # the reference's exact answer, computed when called


def mismatch(
    expected: Any,
    actual: Any,
    tolerance: Tolerance = DTYPE_DEFAULT,
    exact: Answer | None = None,
) -> str | None:
    """None when `actual` matches `expected`, else a one-line report of the first difference.

    With `exact` (an accuracy.Exact of the reference on the same inputs), a floating-point
    element outside `tolerance` still passes when it keeps the accuracy rule; the report then
    gives the solution's error and the reference's own against the exact answer, or says why
    there is none.
    """
    return _mismatch(expected, actual, "output", tolerance, exact)


def _mismatch(
    expected: Any, actual: Any, where: str, tolerance: Tolerance, exact: Answer | None
) -> str | None:
    if isinstance(expected, (tuple, list)):
        if not isinstance(actual, (tuple, list)):
            return f"{where}: expected a {type(expected).__name__}, got {_kind(actual)}"
        if len(actual) != len(expected):
            return f"{where}: expected {len(expected)} items, got {len(actual)}"
        for index, (e, a) in enumerate(zip(expected, actual, strict=True)):
            report = _mismatch(e, a, f"{where}[{index}]", tolerance, _item(exact, index))
            if report:
                return report
        return None
    if isinstance(expected, (bool, int, float)) and not isinstance(actual, torch.Tensor):
        if not isinstance(actual, (bool, int, float)):
            return f"{where}: expected a number, got {_kind(actual)}"
        expected, actual = torch.tensor(expected), torch.tensor(actual)
    if not isinstance(expected, torch.Tensor):
        return None if expected == actual else f"{where}: expected {expected!r}, got {actual!r}"
    if not isinstance(actual, torch.Tensor):
        return f"{where}: expected a Tensor, got {_kind(actual)}"
    return tensor_mismatch(expected, actual, where, tolerance, exact)


def _item(exact: Answer | None, index: int) -> Answer | None:
    """The exact answer at `index` of a tuple or list output, still computed only when asked."""
    if exact is None:
        return None
    whole = exact
    return lambda: whole().item(index)


def _kind(value: Any) -> str:
    return type(value).__name__


def tensor_mismatch(
    expected: torch.Tensor,
    actual: torch.Tensor,
    where: str = "output",
    tolerance: Tolerance = DTYPE_DEFAULT,
    exact: Answer | None = None,
) -> str | None:
    if actual.shape != expected.shape:
        return f"{where}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
    if actual.dtype != expected.dtype:
        return f"{where}: dtype {actual.dtype}, expected {expected.dtype}"
    if actual.device.type != expected.device.type:
        return f"{where}: on {actual.device}, expected {expected.device}"
    # Compared where the reference's output lives: at GBs an output copied to the CPU costs
    # seconds; only the report's few numbers come back.
    expected, actual = expected.detach(), actual.detach().to(expected.device)
    if expected.is_complex():  # compare real and imaginary parts as a trailing axis of 2
        expected, actual = torch.view_as_real(expected), torch.view_as_real(actual)
    if not expected.is_floating_point():
        bad = actual != expected
        return _report(where, expected, actual, bad, "exact equality") if bad.any() else None
    atol, rtol = tolerance.for_dtype(expected.dtype)
    bad = ~torch.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
    if not bad.any():
        return None
    shown = f"atol={atol:g} rtol={rtol:g}"
    if exact is None or expected.dtype not in accuracy.NARROW:
        return _report(where, expected, actual, bad, shown)
    answer = exact().against(expected)
    if isinstance(answer, str):
        return _report(where, expected, actual, bad, f"{shown} alone: {answer}")
    errors = accuracy.errors(expected, actual, *answer)
    bad &= ~errors.within
    if not bad.any():
        return None
    return _report(where, expected, actual, bad, f"{shown}, {accuracy.RULE}", errors)


def _report(
    where: str,
    expected: torch.Tensor,
    actual: torch.Tensor,
    bad: torch.Tensor,
    tolerance: str,
    errors: accuracy.Errors | None = None,
) -> str:
    text = _error_sizes(expected, actual, bad)
    if errors is not None:
        text += errors.describe(bad)
    if expected.dim() == 0:  # a position would read `[]`: name the scalar instead
        values = f"expected {expected.item():.6g} got {actual.item():.6g}"
        return f"{where}: the scalar output: {values}{text}; tolerance {tolerance}"
    count, total = int(bad.sum()), bad.numel()
    positions = bad.nonzero()[:SHOWN_ELEMENTS].tolist()
    shown = "; ".join(
        f"{list(p)} expected {expected[tuple(p)].item():.6g} got {actual[tuple(p)].item():.6g}"
        for p in positions
    )
    return (
        f"{where}: {count} of {total} elements differ ({100 * count / total:.3g}%); "
        f"first: {shown}{text}; tolerance {tolerance}"
    )


def _error_sizes(expected: torch.Tensor, actual: torch.Tensor, bad: torch.Tensor) -> str:
    """The largest absolute and relative errors over the finite elements, and how many differ
    in NaN or infinity. The relative error is taken only where the expected value is not zero
    (it has no meaning there, and dividing by a floor only made a huge number); it is left out
    when every expected value is zero."""
    if not expected.is_floating_point():
        finite = bad
    else:
        finite = torch.isfinite(expected) & torch.isfinite(actual)
    text = ""
    if finite.any():
        e = expected[finite].to(torch.float64)
        diff = (actual[finite].to(torch.float64) - e).abs()
        text = f"; max abs err {diff.max().item():.3g}"
        nonzero = e != 0
        if nonzero.any():
            relative = diff[nonzero] / e[nonzero].abs()
            text += f", max rel err {relative.max().item():.3g}"
    nonfinite = int((bad & ~finite).sum()) if expected.is_floating_point() else 0
    if nonfinite:
        text += f"; {nonfinite} differ in NaN/inf"
    return text
