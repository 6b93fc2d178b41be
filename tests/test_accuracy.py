"""The accuracy rule (harness.accuracy): honest kernels are judged against the exact answer
(the reference run in float64), next to the reference's own error; approximations still fail.

The honest kernels here sum the same terms as the reference in another order (or in double).
Most inputs cancel: each row is [b, b] against [v, -v], so every exact answer is 0 and all that
is left of the float32 reference is its own rounding error, which the dtype tolerance (1e-4)
rejects; only the accuracy rule can pass them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from harness import accuracy, verdicts
from harness.accuracy import Exact, Wide
from harness.loading import Case, Problem
from harness.matching import mismatch
from harness.measure.benchmarking import spot_checker
from harness.measure.checking import check_cases
from harness.settings import Checking, Settings
from harness.verdicts import Verdict

CPU = torch.device("cpu")
CHECKING = Checking(trials=2, seed=0)


def problem_of(model: type, inputs: Callable[[], list[Any]]) -> Problem:
    case = Case("default", list, inputs)
    return Problem("accuracy", Path("accuracy.py"), model, (case,), (case,), None, None)


def judged(
    model: type,
    inputs: Callable[[], list[Any]],
    solution: type,
    checking: Checking = CHECKING,
    device: torch.device = CPU,
) -> str:
    """'ok', or the verdict's status and detail, of `solution` checked as the worker does."""
    try:
        check_cases(problem_of(model, inputs), solution, device, checking)
    except Verdict as verdict:
        return f"{verdict.status}: {verdict.detail}"
    return "ok"


def shuffled(terms: int) -> torch.Tensor:
    """A random order of the terms, other than the reference's."""
    return torch.randperm(terms, generator=torch.Generator().manual_seed(7))


def cancelling(rows: int, terms: int) -> list[torch.Tensor]:
    """[b, b] and [v, -v]: every exact product (row by vector) is 0."""
    b = torch.randn(rows, terms // 2) * 10
    v = torch.randn(terms // 2)
    # Mixed, so that no BLAS sums the two halves with the same roundings: some sum the
    # terms of [b, b] . [v, -v] half against half, and their float32 result is exactly 0.
    mixed = torch.randperm(terms, generator=torch.Generator().manual_seed(3))
    return [torch.cat([b, b], -1)[..., mixed].squeeze(0), torch.cat([v, -v])[mixed]]


class Product(torch.nn.Module):  # matrix-vector product, or dot product for a vector
    def forward(self, a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return a @ x


class RowSum(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(-1)


class ProductInDouble(torch.nn.Module):
    def forward(self, a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return (a.double() @ x.double()).float()


class ProductShuffled(torch.nn.Module):  # float32 BLAS, the terms in a random order
    def forward(self, a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        order = shuffled(x.shape[0])
        return a[..., order] @ x[order]


class ProductShuffledBlocks(torch.nn.Module):  # 256 partial sums, as 256 GPU threads would
    def forward(self, a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        order = shuffled(x.shape[0])
        terms = a[..., order] * x[order]
        return terms.unflatten(-1, (256, -1)).sum(-1).sum(-1)


class RowSumInDouble(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.double().sum(-1).float()


class RowSumShuffledBlocks(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        terms = x[:, shuffled(x.shape[-1])]
        return terms.unflatten(-1, (1000, -1)).sum(-1).sum(-1)


def cancelling_sums() -> list[torch.Tensor]:
    half = torch.randn(4, 500_000) * 10
    return [torch.cat([half, -half], -1)]


HONEST = [
    ("dot 262144", Product, lambda: cancelling(1, 262_144), ProductInDouble),
    ("dot 262144", Product, lambda: cancelling(1, 262_144), ProductShuffled),
    ("dot 262144", Product, lambda: cancelling(1, 262_144), ProductShuffledBlocks),
    ("matvec 16x131072", Product, lambda: cancelling(16, 131_072), ProductInDouble),
    ("matvec 16x131072", Product, lambda: cancelling(16, 131_072), ProductShuffled),
    ("matvec 16x131072", Product, lambda: cancelling(16, 131_072), ProductShuffledBlocks),
    ("sums 4x1000000", RowSum, cancelling_sums, RowSumInDouble),
    ("sums 4x1000000", RowSum, cancelling_sums, RowSumShuffledBlocks),
]


HONEST_CASES = pytest.mark.parametrize(
    ("model", "inputs", "solution"),
    [case[1:] for case in HONEST],
    ids=[f"{case[0]}-{case[3].__name__}" for case in HONEST],
)


@HONEST_CASES
def test_long_dot_products_matvecs_and_sums_in_another_order_pass(
    model: type, inputs: Callable[[], list[Any]], solution: type
) -> None:
    assert judged(model, inputs, solution) == "ok"


@pytest.mark.gpu
@HONEST_CASES
def test_on_the_gpu_other_orders_pass_against_cublas_and_cuda_sums(
    model: type, inputs: Callable[[], list[Any]], solution: type
) -> None:
    assert judged(model, inputs, solution, device=torch.device("cuda")) == "ok"


def test_the_dtype_tolerance_alone_rejects_those_honest_kernels() -> None:
    torch.manual_seed(0)
    inputs = cancelling(16, 131_072)
    expected = Product()(*inputs)
    for solution in (ProductInDouble, ProductShuffled, ProductShuffledBlocks):
        assert mismatch(expected, solution()(*inputs)) is not None


def test_the_issues_matvec_accumulating_in_double_passes() -> None:
    # 64 x 262144 by 262144 x 1: "[39, 0] expected -19.4304 got -19.4325" before this rule
    inputs = lambda: [torch.randn(64, 262_144), torch.randn(262_144, 1)]  # noqa: E731
    assert judged(Product, inputs, ProductInDouble, Checking(trials=1, seed=0)) == "ok"


class Gelu(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)


class GeluTanh(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x, approximate="tanh")


class GeluInHalf(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x.half()).float()


class LayerNorm(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (1024,))


class LayerNormOff(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (1024,)) + 1e-2


class LayerNormWideEps(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (1024,), eps=1e-2)


class ProductInHalf(torch.nn.Module):  # float16 inputs, float32 accumulation (tensor-core style)
    def forward(self, a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return a.half().float() @ x.half().float()


def activations() -> list[torch.Tensor]:
    return [torch.randn(256, 1024) * 3]


def features() -> list[torch.Tensor]:
    return [torch.randn(256, 1024) * 0.1 + 0.05]


def product() -> list[torch.Tensor]:
    return [torch.randn(16, 131_072), torch.randn(131_072)]


APPROXIMATIONS = [
    ("tanh GELU", Gelu, activations, GeluTanh),
    ("GELU in float16", Gelu, activations, GeluInHalf),
    ("LayerNorm off by 1e-2", LayerNorm, features, LayerNormOff),
    ("LayerNorm with eps 1e-2", LayerNorm, features, LayerNormWideEps),
    ("matvec in float16", Product, product, ProductInHalf),
]


APPROXIMATION_CASES = pytest.mark.parametrize(
    ("model", "inputs", "solution"),
    [case[1:] for case in APPROXIMATIONS],
    ids=[case[0] for case in APPROXIMATIONS],
)


@APPROXIMATION_CASES
def test_approximations_stay_incorrect_and_the_report_names_both_errors(
    model: type, inputs: Callable[[], list[Any]], solution: type
) -> None:
    verdict = judged(model, inputs, solution)
    assert verdict.startswith(f"{verdicts.INCORRECT}: case 'default'")
    assert "against float64 at [" in verdict
    assert "the solution's error" in verdict and "the reference's own" in verdict
    assert f"or {accuracy.MULTIPLE:g}x the reference's own error against float64" in verdict


@pytest.mark.gpu
@APPROXIMATION_CASES
def test_on_the_gpu_approximations_stay_incorrect(
    model: type, inputs: Callable[[], list[Any]], solution: type
) -> None:
    verdict = judged(model, inputs, solution, device=torch.device("cuda"))
    assert verdict.startswith(f"{verdicts.INCORRECT}: case 'default'"), verdict
    assert "against float64 at [" in verdict


def test_a_tanh_gelu_errs_thousands_of_times_the_references_own_error() -> None:
    torch.manual_seed(0)
    (x,) = activations()
    report = mismatch(Gelu()(x), GeluTanh()(x), exact=Exact(Gelu(), [x], CPU))
    assert report is not None
    solution, reference = (
        float(part.split()[0].rstrip(","))
        for part in report.split("the solution's error ")[1].split(", the reference's own ")
    )
    assert solution > 1000 * reference


class Float32Only(torch.nn.Module):  # a reference with an op that has no float64 kernel
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32:
            raise TypeError(f"sum_kernel not implemented for {x.dtype}")
        return x.sum(-1)


class StaysFloat32(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.float().sum(-1)


class RowSumPlain(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(-1)


def test_a_reference_that_fails_in_float64_falls_back_to_the_tolerance_and_says_so() -> None:
    verdict = judged(Float32Only, cancelling_sums, RowSumInDouble)
    assert verdict.startswith(f"{verdicts.INCORRECT}: ")
    assert "tolerance atol=0.0001 rtol=0.0001 alone: the reference could not run in float64" in (
        verdict
    )
    assert "TypeError: sum_kernel not implemented for torch.float64" in verdict
    assert judged(Float32Only, lambda: [torch.randn(8, 1000)], RowSumPlain) == "ok"


def test_a_reference_that_keeps_float32_falls_back_and_says_so() -> None:
    verdict = judged(StaysFloat32, cancelling_sums, RowSumInDouble)
    assert "alone: the reference's output stays torch.float32 when run in float64" in verdict


class Noisy(torch.nn.Module):  # a reference whose output depends on torch's generator
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 0.05 * torch.rand_like(x)


class NoisyOwnDraws(torch.nn.Module):  # the same noise from a generator of its own
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        noise = torch.rand(x.shape, generator=torch.Generator().manual_seed(123))
        return x + 0.05 * noise.to(x.dtype)


def test_a_reference_that_draws_random_numbers_is_judged_by_the_tolerance_alone() -> None:
    """torch draws other numbers for a float64 tensor, so the float64 run is not the exact
    answer of a random reference, and its difference must not widen the bound (on the H100, a
    Dropout kernel with a fixed seed of its own passed KernelBench's level-2 problem 66 so)."""
    inputs = lambda: [torch.randn(64, 256)]  # noqa: E731
    verdict = judged(Noisy, inputs, NoisyOwnDraws)
    assert verdict.startswith(f"{verdicts.INCORRECT}: ")
    assert "alone: the reference draws random numbers, which differ in float64" in verdict
    assert judged(Noisy, inputs, Noisy) == "ok"  # torch's numbers in torch's order still pass


def test_spot_checks_of_timed_calls_use_the_same_rule() -> None:
    problem = problem_of(Product, lambda: cancelling(16, 131_072))
    bench = problem.benchmarks[0]
    torch.manual_seed(0)
    inputs = cancelling(16, 131_072)
    checker = spot_checker(problem, bench, Product(), CPU, Settings(), "benchmark 'default'")
    checker.check(ProductInDouble()(*inputs), inputs, "timed call 1")  # passes: no Verdict
    assert mismatch(Product()(*inputs), ProductInDouble()(*inputs)) is not None
    half = [torch.randn(16, 131_072), torch.randn(131_072)]
    with pytest.raises(Verdict) as caught:
        checker.check(ProductInHalf()(*half), half, "timed call 2")
    assert caught.value.status == verdicts.INCORRECT
    assert caught.value.detail.startswith("timed call 2: output: ")
    assert "the solution's error" in caught.value.detail
    assert "the reference's own" in caught.value.detail


def never() -> Wide:
    raise AssertionError("the exact answer was computed, but nothing needed it")


def test_the_exact_answer_is_computed_only_when_the_tolerance_rejects() -> None:
    x = torch.randn(100)
    assert mismatch(x, x + 1e-6, exact=never) is None
    report = mismatch(x.double(), x.double() + 1, exact=never)  # float64 has nothing wider
    assert report is not None and "alone" not in report and "against float64" not in report


def test_integer_outputs_stay_exact_whatever_the_exact_answer() -> None:
    expected = torch.arange(10)
    report = mismatch(expected, expected + 1, exact=never)
    assert report is not None and "exact equality" in report


def test_where_the_reference_is_exact_by_luck_another_order_still_passes() -> None:
    exact = torch.zeros(1000, dtype=torch.float64)
    expected = (torch.randn(1000) * 1e-3).float()
    expected[17] = 0.0  # the reference's own error is 0 at this element
    actual = expected.clone()
    actual[17] = 1e-3  # as far off as the reference typically is
    answer = Wide(exact)
    assert mismatch(expected, actual, exact=lambda: answer) is None
    actual[17] = 1.0  # far more than any multiple of its typical error
    report = mismatch(expected, actual, exact=lambda: answer)
    assert report is not None and "1 of 1000 elements differ" in report
    assert "against float64 at [17]: the solution's error 1, the reference's own 0" in report


def test_the_draws_of_the_references_error_widen_a_scalars_scale() -> None:
    exact = torch.tensor(0.0, dtype=torch.float64)
    expected, actual = torch.tensor(0.0), torch.tensor(1e-3)  # exact by luck, off by 1e-3
    alone = Wide(exact)
    assert mismatch(expected, actual, exact=lambda: alone) is not None
    drawn = Wide(exact, accuracy.fold(None, exact, torch.tensor(5e-4), exact))
    drawn = Wide(exact, accuracy.fold(drawn.spread, exact, torch.tensor(-2e-4), exact))
    assert mismatch(expected, actual, exact=lambda: drawn) is None


def test_nan_and_inf_must_still_sit_at_the_same_places() -> None:
    exact = torch.tensor([1.0, math.nan, 2.0], dtype=torch.float64)
    expected = torch.tensor([1.0, math.nan, 2.0])
    moved = torch.tensor([1.0, 3.0, math.nan])
    report = mismatch(expected, moved, exact=lambda: Wide(exact))
    assert report is not None and "2 of 3 elements differ" in report and "NaN/inf" in report


class Pair(torch.nn.Module):
    def forward(self, a: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a @ x, a.argmax(-1)


class PairInDouble(torch.nn.Module):
    def __init__(self, wrong_index: bool = False) -> None:
        super().__init__()
        self.wrong_index = wrong_index

    def forward(self, a: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        index = a.argmax(-1)
        return (a.double() @ x.double()).float(), index + 1 if self.wrong_index else index


def test_each_item_of_a_tuple_is_judged_against_its_own_exact_answer() -> None:
    torch.manual_seed(0)
    inputs = cancelling(16, 65_536)
    expected = Pair()(*inputs)
    exact = Exact(Pair(), inputs, CPU)
    assert mismatch(expected, PairInDouble()(*inputs), exact=exact) is None
    report = mismatch(expected, PairInDouble(wrong_index=True)(*inputs), exact=exact)
    assert report is not None and report.startswith("output[1]: 16 of 16 elements differ")


def test_the_exact_answer_comes_from_copies_and_leaves_the_reference_as_it_was() -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 8)
    x = torch.randn(4, 64)
    pristine = x.clone()
    answer = Exact(model, [x], CPU)()
    assert answer.missing is None and answer.value.dtype == torch.float64
    assert answer.drawn == accuracy.DRAWS
    assert model.weight.dtype == torch.float32 and torch.equal(x, pristine)
    assert answer.spread.dtype == torch.float64 and answer.spread.shape == (4, 8)
    assert bool((answer.spread > 0).any()) and not bool((answer.spread < 0).any())


def test_a_nudge_moves_elements_one_ulp_toward_zero_and_keeps_zeros_and_ranges() -> None:
    x = torch.tensor([0.0, 1.0, -1.0, 0.5, math.inf, -math.inf, math.nan] + [0.3] * 64)
    moved = accuracy.nudge(x, 0)
    finite = torch.isfinite(x)
    assert torch.equal(moved[~finite].isnan(), x[~finite].isnan())
    assert torch.equal(moved[:1], x[:1]) and torch.equal(moved[4:6], x[4:6])
    assert bool((moved[finite].abs() <= x[finite].abs()).all())
    changed = moved[finite] != x[finite]
    step = (moved[finite] - x[finite]).abs()
    assert 0 < int(changed.sum()) < int(finite.sum())
    eps = torch.finfo(torch.float32).eps
    assert bool((step[changed] <= eps * x[finite][changed].abs()).all())
