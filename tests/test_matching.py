"""Output matching: structure, dtype, exact integers, NaN/inf positions, tolerances, reports."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.matching import Tolerance, mismatch


def test_equal_outputs_match() -> None:
    x = torch.randn(4, 5)
    assert mismatch(x, x.clone()) is None
    assert mismatch((x, [x, 3]), (x.clone(), [x.clone(), 3])) is None


def test_mismatch_report_names_count_indices_errors_and_tolerance() -> None:
    expected = torch.zeros(4, 5)
    actual = expected.clone()
    actual[1, 2], actual[3, 4] = 0.5, -2.0
    report = mismatch(expected, actual, Tolerance(atol=1e-3, rtol=1e-3))
    assert report is not None
    assert "2 of 20 elements differ" in report
    assert "[1, 2] expected 0 got 0.5" in report and "[3, 4] expected 0 got -2" in report
    assert "max abs err 2" in report
    assert "tolerance atol=0.001 rtol=0.001" in report


def test_a_scalar_output_is_named_as_such_not_by_an_empty_position() -> None:
    report = mismatch(torch.tensor(1.5), torch.tensor(2.0))
    assert report is not None
    assert report.startswith("output: the scalar output: expected 1.5 got 2; max abs err 0.5")
    assert "[]" not in report and "elements differ" not in report
    number = mismatch(2.0, 2.5)
    assert number is not None and "the scalar output: expected 2 got 2.5" in number


def test_relative_error_leaves_out_zero_expected_values() -> None:
    # Dividing by zero (or a tiny floor) gave `max rel err 4.49e+307`: a zero expected value
    # has no relative error, so it is taken over the non-zero ones only.
    expected = torch.tensor([0.0, 2.0, 0.0, 4.0])
    actual = torch.tensor([0.5, 3.0, 0.0, 4.0])
    report = mismatch(expected, actual, Tolerance(atol=1e-3, rtol=1e-3))
    assert report is not None and "max abs err 1, max rel err 0.5;" in report
    all_zero = mismatch(torch.zeros(3), torch.tensor([0.0, 1.0, 0.0]))
    assert all_zero is not None and "max abs err 1;" in all_zero and "rel err" not in all_zero


def test_tuple_outputs_report_the_failing_item() -> None:
    a, b = torch.ones(3), torch.ones(3)
    report = mismatch((a, b), (a.clone(), b + 1))
    assert report is not None and report.startswith("output[1]: 3 of 3 elements differ")


@pytest.mark.parametrize(
    ("expected", "actual", "message"),
    [
        ((torch.ones(2), torch.ones(2)), (torch.ones(2),), "expected 2 items, got 1"),
        ((torch.ones(2),), torch.ones(2), "expected a tuple, got Tensor"),
        (torch.ones(2), [1.0, 1.0], "expected a Tensor, got list"),
        (torch.ones(2, 3), torch.ones(3, 2), "shape (3, 2), expected (2, 3)"),
        (torch.ones(2), torch.ones(2, dtype=torch.float64), "dtype torch.float64, expected"),
        (1.5, "1.5", "expected a number, got str"),
    ],
)
def test_structure_shape_and_dtype_must_match(expected, actual, message: str) -> None:
    report = mismatch(expected, actual)
    assert report is not None and message in report


def test_integer_outputs_are_exact_and_never_cast() -> None:
    expected = torch.arange(10, dtype=torch.int64)
    actual = expected.clone()
    actual[7] += 1
    report = mismatch(
        expected, actual, Tolerance(atol=10, rtol=10)
    )  # tolerances do not apply to integers
    assert report is not None and "1 of 10 elements differ" in report
    assert "[7] expected 7 got 8" in report and "exact equality" in report
    assert mismatch(expected, expected.to(torch.int32)) is not None


def test_bool_outputs_are_exact() -> None:
    expected = torch.tensor([True, False, True])
    assert mismatch(expected, torch.tensor([True, True, True])) is not None
    assert mismatch(expected, expected.clone()) is None


def test_nan_and_inf_must_sit_at_the_same_places() -> None:
    expected = torch.tensor([1.0, math.nan, math.inf, -math.inf])
    assert mismatch(expected, expected.clone()) is None
    moved_nan = torch.tensor([math.nan, 1.0, math.inf, -math.inf])
    report = mismatch(expected, moved_nan)
    assert report is not None and "2 of 4 elements differ" in report and "NaN/inf" in report
    flipped = torch.tensor([1.0, math.nan, -math.inf, -math.inf])
    assert mismatch(expected, flipped) is not None
    assert mismatch(expected, torch.tensor([1.0, 5.0, math.inf, -math.inf])) is not None


def test_default_tolerance_depends_on_dtype() -> None:
    expected = torch.full((8,), 1.0)
    off_by_1e3 = expected + 1e-3
    assert mismatch(expected, off_by_1e3) is not None  # float32: 1e-4
    assert mismatch(expected.half(), off_by_1e3.half()) is None  # float16: 1e-2
    assert (
        mismatch(expected, off_by_1e3, Tolerance(atol=1e-2)) is None
    )  # an explicit tolerance wins


def test_complex_outputs_compare_both_parts() -> None:
    expected = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64)
    assert mismatch(expected, expected.clone()) is None
    assert mismatch(expected, expected.conj().resolve_conj()) is not None


def test_python_numbers_compare_as_scalars() -> None:
    assert mismatch(2.0, 2.0 + 1e-9) is None
    assert mismatch(2.0, 2.5) is not None
    assert mismatch("mean", "mean") is None and mismatch("mean", "sum") is not None


@settings(max_examples=60, deadline=None)
@given(
    shape=st.lists(st.integers(1, 6), min_size=1, max_size=3),
    seed=st.integers(0, 2**16),
    data=st.data(),
)
def test_one_element_beyond_tolerance_is_found_where_it_is(shape, seed, data) -> None:
    generator = torch.Generator().manual_seed(seed)
    expected = torch.randn(*shape, generator=generator)
    actual = expected + 1e-6 * torch.randn(*shape, generator=generator)  # within tolerance
    assert mismatch(expected, actual) is None
    flat = data.draw(st.integers(0, expected.numel() - 1))
    index = list(torch.unravel_index(torch.tensor(flat), tuple(shape)))
    position = [int(i) for i in index]
    actual[tuple(position)] += 1.0
    report = mismatch(expected, actual)
    assert report is not None
    assert f"1 of {expected.numel()} elements differ" in report
    assert f"{position} expected" in report
