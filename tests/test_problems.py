"""The shipped problems follow their seeds: operator, shapes, dtypes and input distribution."""

import pytest
import torch
import torch.nn as nn

from harness.loading import load_problem, seed_everything
from tests.conftest import REPO


def problem(name: str):
    return load_problem(name, REPO / "problems" / name / "reference.py")


def test_multilabel_margin_matches_the_seed() -> None:
    p = problem("multilabel_margin")
    seed_everything(0)
    x, target = p.cases[0].get_inputs()
    assert (x.dtype, tuple(x.shape)) == (torch.float32, (512, 1024))
    assert (target.dtype, tuple(target.shape)) == (torch.int64, (512, 1024))
    counts = (target != -1).sum(dim=1)
    assert counts.min() >= 1 and counts.max() <= 10
    for row, count in zip(target, counts, strict=True):  # labels first, then only -1 padding
        labels = row[:count]
        assert (row[count:] == -1).all() and labels.unique().numel() == count
        assert (labels >= 0).all() and (labels < 1024).all()
    assert p.cases[0].get_init_inputs() == ["mean"]
    model = p.model(*p.cases[0].get_init_inputs())
    expected = nn.MultiLabelMarginLoss(reduction="mean")(x, target)
    assert torch.equal(model(x, target), expected)


def test_smooth_l1_matches_the_seed() -> None:
    p = problem("smooth_l1")
    a, b = p.cases[0].get_inputs()
    assert a.shape == b.shape == (32, 64, 56, 56) and a.dtype == b.dtype == torch.float32
    assert p.cases[0].get_init_inputs() == ["mean", 1.0]
    model = p.model("mean", 1.0)
    assert torch.allclose(model(a, b), nn.functional.smooth_l1_loss(a, b, beta=1.0), rtol=1e-5)


def case_inputs(name: str) -> dict[str, list[torch.Tensor]]:
    seed_everything(1)
    return {case.name: case.get_inputs() for case in problem(name).cases}


@pytest.mark.parametrize("name", ["multilabel_margin", "smooth_l1"])
def test_valid_cases_run_on_the_reference_and_invalid_ones_raise(name: str) -> None:
    p = problem(name)
    for case in p.cases[1:]:
        seed_everything(1)
        model, inputs = p.model(*case.get_init_inputs()), case.get_inputs()
        if case.invalid:
            with pytest.raises(RuntimeError, match="out of range"):
                model(*inputs)
            continue
        output = model(*inputs)
        if inputs[0].numel() == 0 and case.get_init_inputs()[0] == "mean":
            assert torch.isnan(output), case.name  # the mean of nothing, as PyTorch has it
        else:
            assert torch.isfinite(output).all(), case.name


def test_multilabel_margin_cases_hold_the_edge_cases() -> None:
    cases = case_inputs("multilabel_margin")
    first = {name: target[..., 0] for name, (_, target) in cases.items()}
    assert (first["no labels"] == -1).any()
    all_labels = cases["all labels"][1]
    assert ((all_labels != -1).all(dim=1)).any()
    duplicate = cases["duplicate labels"][1]
    assert any(len(set(row[: int((row == -1).int().argmax())].tolist())) < 3 for row in duplicate)
    after = cases["labels after -1"][1]
    end = (after == -1).int().argmax(dim=1)
    assert all((row[e + 1 :] >= 0).any() for row, e in zip(after, end, strict=True))
    assert cases["N=1"][0].shape[0] == 1 and cases["13x4099"][0].shape[1] % 4 == 3
    assert (cases["C=10000 all labels"][1] != -1).all(dim=1).any()
    assert cases["C=40000 3000 labels"][0].shape[1] == 40_000
    assert cases["unbatched"][0].dim() == 1 and cases["unbatched"][1].dim() == 1
    assert not cases["strided view"][0].is_contiguous()
    assert cases["offset view"][0].storage_offset() % 4 != 0
    bad = cases["label out of range"][1]
    assert ((bad < -1) | (bad >= bad.shape[1])).any()


def test_smooth_l1_cases_hold_the_edge_cases() -> None:
    p = problem("smooth_l1")
    betas = {case.get_init_inputs()[1] for case in p.cases}
    assert {0.0, 1.0} < betas and len(betas) >= 3
    assert {case.get_init_inputs()[0] for case in p.cases} == {"mean", "sum", "none"}
    cases = case_inputs("smooth_l1")
    assert any(a.numel() % 4 for a, _ in cases.values())
    assert {a.dim() for a, _ in cases.values()} >= {0, 1, 2, 4, 5}
    offsets = [(a.storage_offset(), b.storage_offset()) for a, b in cases.values()]
    assert (1, 3) in offsets and (1, 1) in offsets  # different and equal misalignment
    assert not any(a.is_contiguous() for a in cases["non-contiguous"])
    assert cases["empty mean"][0].numel() == 0
