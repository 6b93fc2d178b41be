"""Inputs: seeded, dtype-preserving, and copied with their exact memory layout."""

import numpy as np
import pytest
import torch

from harness.loading import Case, drawn, make_init_inputs, make_inputs, replicate

CPU = torch.device("cpu")


def mixed_inputs() -> list:
    labels = torch.from_numpy(np.random.randint(0, 10, size=(4,)))
    return [torch.randn(4, 3), labels, torch.rand(4) > 0.5, 2.5]


CASE = Case("mixed", lambda: [], mixed_inputs)


def test_same_seed_same_inputs_other_seed_other_inputs() -> None:
    a, b, c = (make_inputs(CASE, s, CPU) for s in (7, 7, 8))
    assert all(torch.equal(x, y) for x, y in zip(a[:3], b[:3], strict=True))
    assert not torch.equal(a[0], c[0])


def test_numpy_draws_are_seeded_too() -> None:
    assert torch.equal(make_inputs(CASE, 3, CPU)[1], make_inputs(CASE, 3, CPU)[1])


def test_inputs_are_drawn_on_the_device_the_solution_runs_on() -> None:
    """Off the CPU, get_inputs runs with that device as torch's default, so its tensors are
    made there (the meta device stands in for a GPU here); the CPU draws as it always did."""
    x, labels, mask, _ = drawn(mixed_inputs, 5, torch.device("meta"))
    assert (x.device.type, mask.device.type) == ("meta", "meta")
    assert labels.device.type == "cpu"  # made by NumPy: drawn on the CPU, moved later
    assert drawn(mixed_inputs, 5, CPU)[0].device.type == "cpu"


def test_inputs_that_cannot_be_drawn_on_the_device_are_drawn_on_the_cpu_from_the_same_seed() -> (
    None
):
    def through_numpy() -> list:
        return [torch.from_numpy(torch.randn(3, 2).numpy())]  # .numpy() fails off the CPU

    moved = drawn(through_numpy, 9, torch.device("meta"))[0]
    assert moved.device.type == "cpu"
    assert torch.equal(moved, drawn(through_numpy, 9, CPU)[0])


@pytest.mark.gpu
def test_inputs_are_drawn_on_the_gpu_the_same_for_the_same_seed() -> None:
    gpu = torch.device("cuda")
    first, again = (make_inputs(CASE, 11, gpu) for _ in range(2))
    assert first[0].device.type == "cuda"
    assert torch.equal(first[0], again[0]) and torch.equal(first[2], again[2])
    assert not torch.equal(first[0], make_inputs(CASE, 12, gpu)[0])


def test_dtypes_are_never_cast() -> None:
    x, labels, mask, scalar = make_inputs(CASE, 0, CPU)
    assert (x.dtype, labels.dtype, mask.dtype, scalar) == (
        torch.float32,
        torch.int64,
        torch.bool,
        2.5,
    )


@pytest.mark.parametrize(
    "make_view",
    [
        lambda base: base[1:].view(5, 7),  # starts at an odd element: misaligned for float4
        lambda base: base[:35].view(5, 7).t(),  # transposed, not contiguous
        lambda base: base[3:].as_strided((4, 4), (1, 1)),  # overlapping windows
    ],
)
def test_replicate_keeps_offset_strides_and_values(make_view) -> None:
    view = make_view(torch.arange(36, dtype=torch.float32))
    copy = replicate(view, CPU)
    assert torch.equal(copy, view)
    assert copy.stride() == view.stride() and copy.storage_offset() == view.storage_offset()
    assert copy.untyped_storage().data_ptr() != view.untyped_storage().data_ptr()
    copy.fill_(-1)
    assert (view >= 0).all()  # a true copy: writing it leaves the original alone


def test_init_inputs_tensors_are_copied_and_the_rest_kept() -> None:
    weight = torch.randn(3)
    case = Case("w", lambda: [weight, "mean", 2], lambda: [])
    copied, reduction, count = make_init_inputs(case, CPU)
    assert torch.equal(copied, weight) and copied is not weight
    assert (reduction, count) == ("mean", 2)


def test_a_generator_that_returns_no_list_is_refused() -> None:
    with pytest.raises(TypeError, match="get_inputs\\(\\) must return a list"):
        make_inputs(Case("bad", lambda: [], lambda: torch.ones(2)), 0, CPU)
