"""The conv1d problem: PyTorch's semantics (stride 1, no padding), awkward cases, right counts."""

import torch

from harness.loading import load_problem, seed_everything
from tests.conftest import REPO


def problem():
    return load_problem("conv1d", REPO / "problems" / "conv1d" / "reference.py")


def by_definition(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """out[b, oc, w] = sum over ic, k of weight[oc, ic, k] * x[b, ic, w + k], in float64."""
    kernel_width = weight.shape[2]
    windows = x.double().unfold(2, kernel_width, 1)  # (b, ic, out_width, k)
    return torch.einsum("biwk,oik->bow", windows, weight.double())


def cases() -> dict[str, tuple[list, list[torch.Tensor]]]:
    """Each case's init inputs and inputs, drawn from one seed."""
    seed_everything(1)
    return {case.name: (case.get_init_inputs(), case.get_inputs()) for case in problem().cases}


def test_every_case_is_the_convolution_by_its_definition() -> None:
    p = problem()
    for name, (init, (x,)) in cases().items():
        model = p.model(*init)
        assert model.weight.shape == (init[1], init[0], init[2]), name
        with torch.no_grad():
            out = model(x)
        batched = x if x.dim() == 3 else x.unsqueeze(0)
        expected = by_definition(batched, model.weight)
        expected = expected if x.dim() == 3 else expected.squeeze(0)
        assert out.dtype == torch.float32 and out.shape == expected.shape, name
        assert out.shape[-1] == x.shape[-1] - init[2] + 1, name  # no padding
        assert torch.allclose(out.double(), expected, atol=1e-5, rtol=1e-5), name


def test_the_cases_hold_the_edge_cases() -> None:
    drawn = cases()
    widths = {init[2] for init, _ in drawn.values()}
    assert 1 in widths and any(k > 32 for k in widths)  # a kernel wider than one stage
    assert any(x.shape[-1] == init[2] for init, (x,) in drawn.values())  # output width 1
    out_channels = {init[1] for init, _ in drawn.values()}
    for low, high in ((1, 8), (9, 32), (33, 64), (65, 1 << 30)):  # tiled_cuda's tile bands
        assert any(low <= oc <= high and oc % 8 for oc in out_channels), (low, high)
    inputs = [x for _, (x,) in drawn.values()]
    assert any(x.dim() == 3 and x.shape[1] == 1 for x in inputs)  # one input channel
    assert any(x.dim() == 3 and x.shape[0] == 1 for x in inputs)
    assert any(x.dim() == 3 and x.shape[0] == 0 for x in inputs)
    assert any(x.dim() == 2 for x in inputs)  # unbatched
    assert any(not x.is_contiguous() for x in inputs)
    assert any(x.storage_offset() % 4 for x in inputs)
    assert any(x.shape[-1] > 1_000_000 for x in inputs)


def test_the_default_is_small_and_the_benchmarks_are_large() -> None:
    p = problem()
    (x,) = p.cases[0].get_inputs()
    assert x.shape == (4, 16, 200) and p.cases[0].get_init_inputs() == [16, 32, 5]
    names = [benchmark.name for benchmark in p.benchmarks]
    assert names[0] == "default" and len(names) == 4


def test_count_flops_and_count_bytes() -> None:
    p = problem()
    assert p.count_flops is not None and p.count_bytes is not None
    x, weight = torch.randn(3, 5, 40), torch.randn(7, 5, 4)
    out = torch.nn.functional.conv1d(x, weight)
    assert p.count_flops([x], out) == 2 * 3 * 7 * 37 * 5 * 4
    assert p.count_bytes([x], out) == 4 * (3 * 5 * 40 + 7 * 5 * 4 + 3 * 7 * 37)
    unbatched = torch.nn.functional.conv1d(x[0], weight)
    assert p.count_flops([x[0]], unbatched) == 2 * 7 * 37 * 5 * 4
