"""The matmul problem: its cases hold the awkward shapes and layouts, its counts are right."""

import torch

from harness.loading import load_problem, seed_everything
from tests.conftest import REPO


def problem():
    return load_problem("matmul", REPO / "problems" / "matmul" / "reference.py")


def case_inputs() -> dict[str, list[torch.Tensor]]:
    seed_everything(1)
    return {case.name: case.get_inputs() for case in problem().cases}


def test_every_case_is_a_float32_product_of_matching_matrices() -> None:
    p = problem()
    for name, (a, b) in case_inputs().items():
        assert a.dtype == b.dtype == torch.float32 and a.dim() == b.dim() == 2, name
        assert a.shape[1] == b.shape[0], name
        out = p.model()(a, b)
        assert out.shape == (a.shape[0], b.shape[1]), name
        assert torch.allclose(out.double(), a.double() @ b.double(), atol=1e-4, rtol=1e-4), name


def test_the_default_is_small_and_takes_no_init_inputs() -> None:
    p = problem()
    a, b = p.cases[0].get_inputs()
    assert (a.shape, b.shape) == ((256, 384), (384, 320))
    assert p.cases[0].get_init_inputs() == []


def test_the_cases_hold_tails_views_and_empty_products() -> None:
    cases = case_inputs()
    dims = {d for a, b in cases.values() for d in (*a.shape, b.shape[1])}
    assert {0, 1, 17, 127, 129, 255, 257} <= dims
    assert any(d % 4 for d in dims) and any(d % 4 == 0 and d % 16 for d in dims)
    assert any(not a.is_contiguous() for a, _ in cases.values())
    assert any(not b.is_contiguous() for _, b in cases.values())
    assert any(b.stride() == (1, b.shape[0]) for _, b in cases.values())  # a transposed B
    offsets = {x.storage_offset() for pair in cases.values() for x in pair}
    assert {1, 3} <= offsets  # views not 16-byte aligned
    assert any(a.shape[1] == 0 for a, _ in cases.values())  # K = 0: a product of zeros
    assert any(a.shape[1] >= 4096 for a, _ in cases.values())  # a long K


def test_the_benchmarks_include_the_target_shape() -> None:
    names = [benchmark.name for benchmark in problem().benchmarks]
    assert names[0] == "default" and "4096^3" in names and len(names) >= 3


def test_count_flops_is_two_m_n_k() -> None:
    p = problem()
    a, b = torch.randn(3, 5), torch.randn(5, 7)
    assert p.count_flops is not None
    assert p.count_flops([a, b], a @ b) == 2 * 3 * 5 * 7
