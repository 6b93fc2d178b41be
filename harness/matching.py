"""Decide whether a solution's output matches the reference's, and say where it does not.

Outputs may be a tensor, a Python number, or a (nested) tuple or list of them. Each tensor must
match in type, shape, dtype and device; integer and bool tensors must be equal exactly; for
floating-point tensors NaN and infinity must sit at the same places (with the same sign) and the
finite values must satisfy |actual - expected| <= atol + rtol * |expected|, or, where given the
reference's exact answer (`exact`, run in float64 only when that fails), keep the accuracy rule
of harness.accuracy: an error against the exact answer within a multiple of the reference's own.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from harness import accuracy
from harness.accuracy import Index, blocks, first_positions, offsets
from harness.tolerance import DTYPE_DEFAULT, Tolerance

SHOWN_ELEMENTS = 5  # how many mismatching elements a report names


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


def excess(expected: Any, actual: Any, tolerance: Tolerance = DTYPE_DEFAULT) -> float:
    """How far `actual` strays from `expected` as a share of what `tolerance` allows: the largest
    |actual - expected| / (atol + rtol * |expected|) over every floating-point element (NaN or
    infinity at the same place counting 0), where 1 is the edge (`mismatch` passes up to it);
    inf where they differ in structure, in NaN or infinity, or in an integer or bool. A block
    at a time."""
    if isinstance(expected, (tuple, list)):
        if not isinstance(actual, (tuple, list)) or len(actual) != len(expected):
            return math.inf
        shares = [excess(e, a, tolerance) for e, a in zip(expected, actual, strict=True)]
        return max(shares, default=0.0)
    if not isinstance(expected, torch.Tensor):
        expected = torch.tensor(expected)
    if not isinstance(actual, torch.Tensor):
        actual = torch.tensor(actual)
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return math.inf
    expected, actual = expected.detach(), actual.detach().to(expected.device)
    if expected.is_complex():
        expected, actual = torch.view_as_real(expected), torch.view_as_real(actual)
    if not expected.is_floating_point():
        return math.inf if differ(expected, actual, lambda i, e, a: a != e) else 0.0
    atol, rtol = tolerance.for_dtype(expected.dtype)
    largest = 0.0
    for index in blocks(expected.shape):
        e, a = expected[index].to(torch.float64), actual[index].to(torch.float64)
        same = (a == e) | (torch.isnan(a) & torch.isnan(e))
        share = (a - e).abs() / (atol + rtol * e.abs())
        share = torch.where(same, 0.0, torch.nan_to_num(share, nan=math.inf))
        if share.numel():
            largest = max(largest, share.max().item())
    return largest


def _item(exact: Answer | None, index: int) -> Answer | None:
    """The exact answer at `index` of a tuple or list output, still computed only when asked."""
    if exact is None:
        return None
    whole = exact
    return lambda: whole().item(index)


def _kind(value: Any) -> str:
    return type(value).__name__


Outside = Callable[[Index, torch.Tensor, torch.Tensor], torch.Tensor]
# (block, expected's block, actual's block) -> where the block's elements fail the criterion


def tensor_mismatch(
    expected: torch.Tensor,
    actual: torch.Tensor,
    where: str = "output",
    tolerance: Tolerance = DTYPE_DEFAULT,
    exact: Answer | None = None,
) -> str | None:
    """`mismatch` of two tensors, compared a block at a time (harness.accuracy), so that an output
    of any size needs temporaries of one block only."""
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
        unequal: Outside = lambda index, e, a: a != e  # noqa: E731
        if not differ(expected, actual, unequal):
            return None
        return _report(where, expected, actual, unequal, "exact equality")
    atol, rtol = tolerance.for_dtype(expected.dtype)

    def outside(index: Index, e: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        return ~torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)

    if not differ(expected, actual, outside):
        return None
    shown = f"atol={atol:g} rtol={rtol:g}"
    if exact is None or expected.dtype not in accuracy.NARROW:
        return _report(where, expected, actual, outside, shown)
    answer = exact().against(expected)
    if isinstance(answer, str):
        return _report(where, expected, actual, outside, f"{shown} alone: {answer}")
    rule = accuracy.Rule(expected, actual, *answer)

    def failing(index: Index, e: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        return outside(index, e, a) & ~rule.errors(index, e, a).within

    if not differ(expected, actual, failing):
        return None
    return _report(where, expected, actual, failing, f"{shown}, {accuracy.RULE}", rule)


def differ(expected: torch.Tensor, actual: torch.Tensor, outside: Outside) -> bool:
    """Whether any element of two same-shaped tensors fails `outside`, a block at a time."""
    return any(
        bool(outside(index, expected[index], actual[index]).any())
        for index in blocks(expected.shape)
    )


@dataclass
class Tally:
    """What a report says of the elements that fail, gathered a block at a time: how many, the
    first few, the largest errors over the finite elements (over the failing ones, for integer
    tensors), and, under the accuracy rule, the worst of them against float64."""

    bad: int = 0
    positions: list[list[int]] = field(default_factory=list)
    max_abs: float | None = None
    max_rel: float | None = None
    nonfinite: int = 0
    worst: tuple[float, list[int], float, float] | None = None  # ratio, where, both errors

    def add(self, index: Index, e: torch.Tensor, a: torch.Tensor, bad: torch.Tensor) -> None:
        self.bad += int(bad.sum())
        self.positions += first_positions(bad, index, SHOWN_ELEMENTS - len(self.positions))
        floating = e.is_floating_point()
        finite = torch.isfinite(e) & torch.isfinite(a) if floating else bad
        if floating:
            self.nonfinite += int((bad & ~finite).sum())
        if not finite.any():
            return
        wanted = e[finite].to(torch.float64)
        diff = (a[finite].to(torch.float64) - wanted).abs()
        self.max_abs = max(self.max_abs or 0.0, diff.max().item())
        nonzero = wanted != 0
        if nonzero.any():
            relative = (diff[nonzero] / wanted[nonzero].abs()).max().item()
            self.max_rel = max(self.max_rel or 0.0, relative)

    def add_worst(self, index: Index, bad: torch.Tensor, errors: accuracy.Errors) -> None:
        """Keep the failing element whose error is the largest share of what the rule allows."""
        ratio = torch.where(bad, errors.solution / errors.allowed.clamp_min(1e-300), -1.0)
        ratio = torch.nan_to_num(ratio, nan=-1.0, posinf=-1.0)
        if not bool((ratio >= 0).any()):
            return
        local = [int(i) for i in torch.unravel_index(ratio.argmax(), ratio.shape)]
        value = ratio[tuple(local)].item()
        if self.worst is None or value > self.worst[0]:
            at = (torch.tensor(local) + offsets(index, ratio.dim(), torch.device("cpu"))).tolist()
            solution, reference = errors.solution[tuple(local)], errors.reference[tuple(local)]
            self.worst = (value, at, solution.item(), reference.item())

    def sizes(self) -> str:
        """The largest absolute and relative errors, and how many differ in NaN or infinity.
        The relative error is taken only where the expected value is not zero (it has no
        meaning there, and dividing by a floor only made a huge number); it is left out when
        every expected value is zero."""
        text = "" if self.max_abs is None else f"; max abs err {self.max_abs:.3g}"
        if self.max_rel is not None:
            text += f", max rel err {self.max_rel:.3g}"
        if self.nonfinite:
            text += f"; {self.nonfinite} differ in NaN/inf"
        return text


def _report(
    where: str,
    expected: torch.Tensor,
    actual: torch.Tensor,
    outside: Outside,
    tolerance: str,
    rule: accuracy.Rule | None = None,
) -> str:
    tally = Tally()
    for index in blocks(expected.shape):
        e, a = expected[index], actual[index]
        bad = outside(index, e, a)
        tally.add(index, e, a, bad)
        if rule is not None:
            tally.add_worst(index, bad, rule.errors(index, e, a))
    text = tally.sizes()
    if rule is not None and tally.worst is not None:
        _, at, solution, reference = tally.worst
        place = f" at {at}" if at else ""  # a scalar has no position to name
        text += (
            f"; against float64{place}: the solution's error {solution:.3g}, the reference's "
            f"own {reference:.3g} (typically {rule.typical:.3g})"
        )
    if expected.dim() == 0:  # a position would read `[]`: name the scalar instead
        values = f"expected {expected.item():.6g} got {actual.item():.6g}"
        return f"{where}: the scalar output: {values}{text}; tolerance {tolerance}"
    count, total = tally.bad, expected.numel()
    shown = "; ".join(
        f"{p} expected {expected[tuple(p)].item():.6g} got {actual[tuple(p)].item():.6g}"
        for p in tally.positions
    )
    return (
        f"{where}: {count} of {total} elements differ ({100 * count / total:.3g}%); "
        f"first: {shown}{text}; tolerance {tolerance}"
    )
