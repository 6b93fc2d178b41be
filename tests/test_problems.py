"""The shipped problems follow their seeds: operator, shapes, dtypes and input distribution."""

import pytest
import torch
import torch.nn as nn

from harness.inputs import seed_everything
from harness.loading import load_problem
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


@pytest.mark.parametrize("name", ["multilabel_margin", "smooth_l1"])
def test_every_case_runs_on_the_reference(name: str) -> None:
    p = problem(name)
    for case in p.cases[1:]:
        seed_everything(1)
        output = p.model(*case.get_init_inputs())(*case.get_inputs())
        assert torch.isfinite(output).all(), case.name
