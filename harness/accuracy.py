"""The accuracy rule: a solution's error against the exact answer, next to the reference's own.

Float32 PyTorch is not exact: over a long reduction its own error can exceed the dtype's
tolerance (atol 1e-4, rtol 1e-4), so an honest kernel that rounds differently, or more
precisely, fails against it. So the reference also runs wide (float64, on a copy of the model
and of the inputs) and gives the exact answer; an element of a float32, float16 or bfloat16
output passes when

    |actual - exact| <= MULTIPLE * scale + FLOOR_ULPS * eps(dtype) * |exact|

or when it passes the dtype tolerance (harness.matching). `scale` is the reference's own error
|expected - exact| (`expected` being the reference in the problem's dtype), made robust to luck:
at each element the largest of that error and of DRAWS more draws of it (the reference run in
its dtype and wide on copies of the inputs, some elements moved one unit in the last place), and at
least the median of that over the output tensor. One draw of a rounding error can be about zero
by luck, or by a symmetry of the inputs; another summation order must still pass there. The
figures behind the constants are in docs/judging.md ("How a solution is judged") and were
measured by tuning/accuracy_float32_vs_float64.py.

The wide runs cost 1 + 2 * DRAWS model calls, so they are made only for a comparison that the
dtype tolerance rejects (`Exact`). Where they cannot be made (an op without a float64 kernel, a
model that raises or keeps float32, one that draws random numbers: torch draws others for a
float64 tensor), the dtype tolerance alone applies and the report says why.

A tensor read a block at a time, so that what the harness computes from an output of any size
(comparisons, fingerprints, the accuracy rule) needs temporaries of one block, not of the whole.

A block is a view (no copy) of at most BLOCK_ELEMENTS elements, whatever the tensor's strides;
blocks come in row-major order, so the first elements found in them are the tensor's first.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from harness import tolerance
from harness.stats import part

WIDE = torch.float64  # the exact answer's dtype
# A solution may err this many times the reference's own error (its scale, see above).
# Measured on the CPU (docs/judging.md): honest other orders of sums and products of 1e5..1e6
# terms need up to 30x (32 lanes each summing 8192 terms one after another, a dot product whose
# exact answer is 0), float16 arithmetic in a float32 problem 164x (a matrix-vector product) to
# 1e5x, tanh-GELU 1.1e4x, a LayerNorm off by 1e-2 2e5x.
MULTIPLE = tolerance.ACCURACY_MULTIPLE  # the rule's two constants, decided in harness.tolerance
FLOOR_ULPS = tolerance.ACCURACY_ULPS
DRAWS = 4  # more draws of the reference's own error, on inputs moved by one ulp
DRAW_SEED = 12  # the moves are random, from this seed (they need no secret: they only loosen)
NARROW = (torch.float32, torch.float16, torch.bfloat16)  # the output dtypes it applies to
RULE = (
    f"or {MULTIPLE:g}x the reference's own error against float64 (its typical error at least) "
    f"+ {FLOOR_ULPS:g} ulps"
)


@dataclass(frozen=True)
class Wide:
    """The reference's exact answer at one place of the output's structure, with the largest
    error of the draws of its own error there (the same structure, float64 tensors as matching
    compares them, None where no draw says), or why there is no exact answer."""

    value: Any = None
    spread: Any = None
    missing: str | None = None  # why there is no exact answer here
    drawn: int = 0  # the draws folded into `spread`

    def item(self, index: int) -> Wide:
        """The answer at `index` of a tuple or list output."""
        if self.missing is not None:
            return self
        if not isinstance(self.value, (tuple, list)) or index >= len(self.value):
            return Wide(missing="the reference's float64 output has another structure")
        return Wide(self.value[index], _at(self.spread, index), drawn=self.drawn)

    def against(self, expected: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None] | str:
        """For `expected` (as compared: where it lives, complex as real pairs), the exact answer in
        float64 and the largest error of the draws at each element (None where no draw says:
        zero), or why there is no exact answer."""
        if self.missing is not None:
            return self.missing
        exact = _as_compared(self.value, expected)
        if exact is None:
            return "the reference's float64 output has another type or shape"
        if exact.dtype != WIDE:
            return f"the reference's output stays {exact.dtype} when run in float64"
        spread = _as_compared(self.spread, expected)
        return exact, spread if spread is not None and spread.dtype == WIDE else None


def _at(value: Any, index: int) -> Any:
    return value[index] if isinstance(value, (tuple, list)) and index < len(value) else None


def _as_compared(value: Any, expected: torch.Tensor) -> torch.Tensor | None:
    """`value` as matching compares `expected` (a tensor where it lives, complex as real pairs),
    or None when it is not a tensor or number of that shape."""
    value = _compared_form(value)
    if value is None or value.shape != expected.shape:
        return None
    return value.to(expected.device)


def _compared_form(value: Any) -> torch.Tensor | None:
    """A tensor or number as matching compares it (complex as real pairs), or None."""
    if isinstance(value, (bool, int, float, complex)):
        value = torch.tensor(value, dtype=torch.complex128 if isinstance(value, complex) else WIDE)
    if not isinstance(value, torch.Tensor):
        return None
    value = value.detach()
    return torch.view_as_real(value) if value.is_complex() else value


class Exact:
    """The reference's exact answer on one set of inputs, computed when first asked for and
    kept: a copy of the model with its floating-point parameters and buffers cast to float64,
    on copies of the inputs cast up (integer inputs as they are); and DRAWS draws of its own
    error, each on copies of the inputs with some elements moved by one ulp (`nudge`), folded
    into their largest at each element as each is made, so that one draw is held at a time.
    A run that fails (out of memory, say) leaves no answer, or fewer draws, and says why."""

    def __init__(self, model: Any, inputs: list[Any], device: torch.device) -> None:
        self.model = model
        self.inputs = inputs
        self.device = device
        self.answer: Wide | None = None

    def __call__(self) -> Wide:
        if self.answer is None:
            with part("float64"):
                self.answer = self._run()
        return self.answer

    def _run(self) -> Wide:
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):  # torch's generators put back after
            before = _generator_states(self.device)
            try:
                wide = copy.deepcopy(self.model)
                if isinstance(wide, torch.nn.Module):
                    wide._apply(widen)
                value = self._call(wide, [widen(v) for v in self.inputs])
            except Exception as err:
                return Wide(missing=f"the reference could not run in float64 ({_describe(err)})")
            drew = any(map(_moved, before, _generator_states(self.device)))
        if drew:  # torch draws other numbers for a float64 tensor (a Dropout mask on CUDA)
            return Wide(missing="the reference draws random numbers, which differ in float64")
        spread = None
        drawn = 0
        try:  # a draw that fails (a moved input outside the reference's domain) only costs it
            for draw in range(DRAWS):
                first = DRAW_SEED + 1000 * draw  # then one seed per input
                moved = [nudge(v, first + i) for i, v in enumerate(self.inputs)]
                narrow = self._call(self.model, moved)
                spread = fold(spread, value, narrow, self._call(wide, [widen(v) for v in moved]))
                drawn += 1
        except Exception as err:
            print(f"accuracy: draw {drawn + 1} of {DRAWS} failed: {_describe(err)}")
        return Wide(value, spread, drawn=drawn)

    def _call(self, model: Any, inputs: list[Any]) -> Any:
        with torch.no_grad():
            output = model(*inputs)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return output


def _generator_states(device: torch.device) -> list[torch.Tensor]:
    """torch's default generators' states: the CPU's, and `device`'s on a GPU."""
    states = [torch.get_rng_state()]
    if device.type == "cuda":
        states.append(torch.cuda.get_rng_state(device))
    return states


def _moved(before: torch.Tensor, after: torch.Tensor) -> bool:
    return not torch.equal(before, after)


def _describe(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[0] if lines else '(no message)'}"


def fold(spread: Any, value: Any, narrow: Any, wide: Any) -> Any:
    """`spread` (None, or the structure of `value` holding float64 tensors or None) with one
    more draw folded in: at each element the larger of it and |narrow - wide|, NaN and
    infinity counting as no error. A place where the draw has another structure or shape than
    `value` is left as it was."""
    if isinstance(value, (tuple, list)):
        return [
            fold(_at(spread, i), item, _at(narrow, i), _at(wide, i)) for i, item in enumerate(value)
        ]
    target, e, x = _compared_form(value), _compared_form(narrow), _compared_form(wide)
    if target is None or e is None or x is None or not target.shape == e.shape == x.shape:
        return spread
    if spread is None:
        spread = torch.zeros(target.shape, dtype=WIDE, device=target.device)
    e, x = e.to(target.device), x.to(target.device)
    for index in blocks(spread.shape):
        error = torch.nan_to_num((e[index].to(WIDE) - x[index].to(WIDE)).abs(), 0.0, 0.0, 0.0)
        torch.maximum(spread[index], error, out=spread[index])
    return spread


def widen(value: Any) -> Any:
    """A float64 (complex128) copy of a floating-point (complex) tensor; anything else as is,
    a tensor copied."""
    if not isinstance(value, torch.Tensor):
        return copy.deepcopy(value)
    if value.is_floating_point():
        return value.detach().to(WIDE, copy=True)
    if value.is_complex():
        return value.detach().to(torch.complex128, copy=True)
    return value.detach().clone()


BITS = {2: torch.int16, 4: torch.int32, 8: torch.int64}  # an integer of each float's size


def nudge(value: Any, seed: int) -> Any:
    """A copy of `value`; of a floating-point tensor, with each normal finite element moved one
    unit in the last place toward zero, or not, at random (from `seed`, on the tensor's device).
    Toward zero, so that an input in a range about zero ([0, 1], say) stays in it; zeros stay
    zeros."""
    if not isinstance(value, torch.Tensor):
        return copy.deepcopy(value)
    moved = value.detach().clone()
    if not value.is_floating_point():
        return moved
    moved = moved.contiguous()
    info = torch.finfo(moved.dtype)
    movable = (moved.abs() >= info.tiny) & (moved.abs() <= info.max)  # not NaN, inf, subnormal
    generator = torch.Generator(moved.device).manual_seed(seed)
    coin = torch.randint(
        0, 2, moved.shape, generator=generator, device=moved.device, dtype=torch.uint8
    )
    bits = moved.view(BITS[moved.element_size()])  # sign and magnitude: minus one is toward 0
    bits -= (movable & (coin == 1)).to(bits.dtype)
    return moved


@dataclass(frozen=True)
class Errors:
    """Both errors against the exact answer over one block of an output (float64, the block's
    shape), and what the rule allows there."""

    solution: torch.Tensor  # |actual - exact|, NaN where any of the three is not finite
    reference: torch.Tensor  # |expected - exact|, the same
    allowed: torch.Tensor  # what the rule allows at each element

    @property
    def within(self) -> torch.Tensor:
        """Where the solution keeps the rule (never at a NaN or infinity)."""
        return self.solution <= self.allowed


MEDIAN_ELEMENTS = 1 << 26  # above this many elements, `typical` is the median of a sample


class Rule:
    """The accuracy rule over one output tensor (see the module doc), a block at a time
    (`blocks`, below): `exact` and the draws' `spread` as Wide.against gives them.

    `typical`, the median over the tensor of the reference's error and its draws', is exact up
    to MEDIAN_ELEMENTS elements; above, the median of every k-th finite element (k the fewest
    that keeps MEDIAN_ELEMENTS at most), so that it needs a bounded copy."""

    def __init__(
        self,
        expected: torch.Tensor,
        actual: torch.Tensor,
        exact: torch.Tensor,
        spread: torch.Tensor | None,
    ) -> None:
        self.exact, self.spread = exact, spread
        self.eps = torch.finfo(expected.dtype).eps
        self.typical = 0.0
        stride = max(1, math.ceil(expected.numel() / MEDIAN_ELEMENTS))
        kept, seen = [], 0
        for index in blocks(expected.shape):
            e, a = expected[index].to(WIDE), actual[index].to(WIDE)
            finite = torch.isfinite(e) & torch.isfinite(a) & torch.isfinite(exact[index])
            scale = self._scale(index, e)[finite]
            # a copy of the sample: a view would keep each block's whole scale alive
            kept.append(scale[(-seen) % stride :: stride].clone() if stride > 1 else scale)
            seen += scale.numel()
        values = torch.cat(kept) if kept else torch.empty(0, dtype=WIDE)
        self.typical = values.median().item() if values.numel() else 0.0

    def _scale(self, index: Index, e: torch.Tensor) -> torch.Tensor:
        """The reference's own error at each element of the block, at least its draws'."""
        reference = (e - self.exact[index]).abs()
        return reference if self.spread is None else torch.maximum(reference, self.spread[index])

    def errors(self, index: Index, expected: torch.Tensor, actual: torch.Tensor) -> Errors:
        """The rule's terms over the block at `index` (`expected` and `actual` are its)."""
        e, a, x = expected.to(WIDE), actual.to(WIDE), self.exact[index]
        finite = torch.isfinite(e) & torch.isfinite(a) & torch.isfinite(x)
        nan = torch.tensor(float("nan"), dtype=WIDE)
        reference = torch.where(finite, (e - x).abs(), nan)
        solution = torch.where(finite, (a - x).abs(), nan)
        scale = torch.where(finite, self._scale(index, e), nan)
        allowed = MULTIPLE * scale.clamp_min(self.typical) + FLOOR_ULPS * self.eps * x.abs()
        return Errors(solution, reference, allowed)


BLOCK_ELEMENTS = 1 << 24  # a block's elements: a float64 temporary of one is 128 MiB
Index = tuple[slice, ...]  # a block of a tensor: tensor[index], leading dimensions sliced


def blocks(shape: torch.Size | tuple[int, ...], limit: int | None = None) -> Iterator[Index]:
    """Indices that cover a tensor of `shape` once, in row-major order, each selecting at most
    `limit` elements (BLOCK_ELEMENTS unless given); a tensor with no element has no block, a
    scalar one block, `()`."""
    limit = limit or BLOCK_ELEMENTS
    if not shape:
        yield ()
        return
    if 0 in shape:
        return
    inner = math.prod(shape[1:])
    if inner <= limit or len(shape) == 1:
        step = max(1, limit // inner)
        for start in range(0, shape[0], step):
            yield (slice(start, min(start + step, shape[0])),)
        return
    for first in range(shape[0]):
        for rest in blocks(shape[1:], limit):
            yield (slice(first, first + 1), *rest)


def offsets(index: Index, dims: int, device: torch.device) -> torch.Tensor:
    """The position in the whole tensor (of `dims` dimensions) of a block's first element."""
    starts = [part.start for part in index] + [0] * (dims - len(index))
    return torch.tensor(starts, dtype=torch.int64, device=device)


def first_positions(mask: torch.Tensor, index: Index, count: int) -> list[list[int]]:
    """The positions in the whole tensor of the first `count` True elements of `mask`, the
    block at `index`."""
    if count <= 0 or mask.dim() == 0:
        return []
    found = mask.nonzero()[:count]
    return (found + offsets(index, mask.dim(), found.device)).tolist()
