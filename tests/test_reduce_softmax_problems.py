"""The sum_reduce and softmax problems: PyTorch's semantics, awkward cases, large benchmarks."""

import torch

from harness.loading import load_problem, seed_everything
from tests.conftest import REPO


def problem(name: str):
    return load_problem(name, REPO / "problems" / name / "reference.py")


def cases(name: str) -> dict[str, tuple[list, torch.Tensor]]:
    """Each case's init inputs and its one input tensor, drawn from one seed."""
    seed_everything(1)
    drawn = {}
    for case in problem(name).cases:
        (x,) = case.get_inputs()
        drawn[case.name] = (case.get_init_inputs(), x)
    return drawn


def test_sum_reduce_is_the_sum_over_dim() -> None:
    p = problem("sum_reduce")
    for name, (init, x) in cases("sum_reduce").items():
        out = p.model(*init)(x)
        expected = x.double().sum(init[0])
        assert out.dtype == torch.float32 and out.shape == expected.shape, name
        scale = x.double().abs().sum(init[0]) if x.numel() else expected
        assert torch.all((out.double() - expected).abs() <= 1e-5 * scale + 1e-6), name


def test_sum_reduce_cases_hold_the_edge_cases() -> None:
    drawn = cases("sum_reduce")
    dims = {init[0] % max(x.dim(), 1) for init, x in drawn.values() if x.dim() == 3}
    assert dims == {0, 1, 2}  # first, middle and last
    assert any(init[0] < 0 for init, _ in drawn.values())
    assert any(x.dim() == 3 and x.shape[init[0]] == 1 for init, x in drawn.values())
    assert any(x.dim() > 0 and x.shape[init[0]] > 1_000_000 for init, x in drawn.values())
    assert any(x.dim() > 0 and x.shape[init[0]] == 0 for init, x in drawn.values())
    assert any(x.dim() <= 1 for _, x in drawn.values())  # 0-D output or input
    assert any(not x.is_contiguous() for _, x in drawn.values())
    assert any(x.storage_offset() % 4 for _, x in drawn.values())
    assert any(x.abs().max() > 1e29 for _, x in drawn.values() if x.numel())


def test_softmax_is_torch_softmax_and_log_softmax() -> None:
    p = problem("softmax")
    for name, (init, x) in cases("softmax").items():
        out = p.model(*init)(x)
        op = torch.log_softmax if init[0] else torch.softmax
        expected = op(x.double(), dim=-1)
        assert out.dtype == torch.float32 and out.shape == x.shape, name
        assert torch.allclose(out.double(), expected, atol=1e-6, rtol=1e-4), name
        if x.numel() and not init[0]:
            sums = out.double().sum(-1)
            assert torch.allclose(sums, torch.ones_like(sums), atol=1e-4), name


def test_softmax_cases_hold_the_edge_cases() -> None:
    drawn = cases("softmax")
    assert {init[0] for init, _ in drawn.values()} == {False, True}
    lengths = {x.shape[-1] for _, x in drawn.values() if x.dim()}
    assert {1, 7, 33, 1023, 1025, 10007, 65537} <= lengths
    assert any(x.dim() == 3 for _, x in drawn.values())
    assert any(x.numel() and x.abs().max() >= 1000 for _, x in drawn.values())
    assert any(not x.is_contiguous() for _, x in drawn.values())
    assert any(x.storage_offset() % 4 for _, x in drawn.values())
    equal = drawn["equal rows"][1]
    assert any(bool((row == row[0]).all()) for row in equal)


def test_the_defaults_are_small_and_the_benchmarks_named_as_the_notes_say() -> None:
    expected = {
        "sum_reduce": ["default", "256 MiB dim0", "256 MiB dim1", "256 MiB dim2"],
        "softmax": ["default", "4096x8192", "4096x8192 log", "256x131072", "65536x128"],
    }
    for name, names in expected.items():
        p = problem(name)
        seed_everything(0)
        (x,) = p.cases[0].get_inputs()
        assert x.numel() <= 1 << 20, name
        assert [b.name for b in p.benchmarks][: len(names)] == names, name
