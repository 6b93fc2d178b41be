"""--precision: a problem run at fp32, fp16 or bf16, as KernelBench's evaluator runs it, with
integer and bool inputs left alone; the tolerance each profile applies at each dtype."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from harness import accuracy, loading, tolerance
from harness import record as record_
from harness.loading import load_problem, make_inputs
from harness.matching import mismatch
from harness.measure import hardware
from harness.measure.checking import build_models
from harness.results import comparison
from harness.settings import Checking, Settings
from harness.tolerance import Tolerance
from harness.verdicts import UserError
from tests.conftest import REPO, TOY, CliRun, toy_solution
from tests.records_factory import bench, record

CPU = torch.device("cpu")
MULTILABEL = REPO / "problems" / "multilabel_margin" / "reference.py"


def test_floating_inputs_are_cast_and_integer_inputs_left_alone() -> None:
    problem = loading.at_precision(load_problem("multilabel_margin", MULTILABEL), "bf16")
    scores, target = make_inputs(problem.cases[0], 7, CPU)
    assert scores.dtype == torch.bfloat16 and target.dtype == torch.int64
    plain = make_inputs(load_problem("m", MULTILABEL).cases[0], 7, CPU)
    assert torch.equal(target, plain[1])  # the labels, untouched (KernelBench issue #151)
    assert torch.equal(scores, plain[0].to(torch.bfloat16))


def test_a_cast_view_keeps_its_strides_and_offset() -> None:
    problem = loading.at_precision(load_problem("multilabel_margin", MULTILABEL), "fp16")
    offset = next(c for c in problem.cases if c.name == "offset view")
    strided = next(c for c in problem.cases if c.name == "strided view")
    scores, _ = make_inputs(offset, 3, CPU)
    assert scores.dtype == torch.float16 and scores.storage_offset() == 1
    transposed, _ = make_inputs(strided, 3, CPU)
    assert transposed.stride() == (1, 9)


class Normed(nn.Module):
    """A model with float parameters and an integer buffer (BatchNorm's step count)."""

    def __init__(self, scale: float = 2.0) -> None:  # the toy's init input
        super().__init__()
        self.linear = nn.Linear(8, 4)
        self.norm = nn.BatchNorm1d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.linear(x))


def test_both_models_parameters_and_float_buffers_are_cast_not_integer_ones() -> None:
    problem = load_problem("toy", TOY / "reference.py")
    at_bf16 = loading.at_precision(problem, "bf16")
    normed = type(problem)(**{**vars(at_bf16), "model": Normed})
    reference, solution = build_models(normed, Normed, normed.cases[0], 1, CPU)
    for model in (reference, solution):
        assert model.linear.weight.dtype == torch.bfloat16
        assert model.norm.running_mean.dtype == torch.bfloat16
        assert model.norm.num_batches_tracked.dtype == torch.int64
    assert loading.at_precision(problem, None) is problem  # no flag: the problem as written


def test_the_speed_of_light_counts_flops_at_the_precision_run() -> None:
    problem = loading.at_precision(load_problem("toy", TOY / "reference.py"), "fp16")
    inputs = make_inputs(problem.benchmarks[1], 1, CPU)  # 256x256
    model = nn.Linear(256, 256).to(torch.float16)
    _, work = hardware.work(problem, model, inputs, CPU)
    assert work.bound.flop_class == "fp16"
    assert hardware.peak_tflops("NVIDIA H200", "bf16") > 10 * hardware.peak_tflops(
        "NVIDIA H200", "fp32"
    )


def test_each_profile_and_dtype_gets_its_tolerance() -> None:
    # KernelBench's table follows the precision run (its get_tolerance_for_precision) ...
    assert tolerance.kernelbench(torch.float32) == 1e-4
    assert tolerance.kernelbench(torch.float16) == tolerance.kernelbench(torch.bfloat16) == 1e-2
    # ... and the harness's default, the output dtype's, before its float64 accuracy rule.
    assert Tolerance().for_dtype(torch.float32) == (1e-4, 1e-4)
    assert Tolerance().for_dtype(torch.float16) == (1e-2, 1e-2)
    assert Tolerance().for_dtype(torch.bfloat16) == (2e-2, 2e-2)
    assert Checking(precision="bf16").precision == "bf16"


def test_a_correct_bf16_kernel_passes_and_one_off_by_more_than_bf16_fails() -> None:
    # A long reduction at bf16: PyTorch's own answer errs by several bf16 units. A kernel that
    # sums in float32 and rounds once is right; one off by 5% (ten units of bf16) is wrong.
    torch.manual_seed(0)
    weights = torch.randn(64, 4096)
    inputs = [torch.randn(32, 4096).to(torch.bfloat16)]
    reference = nn.Linear(4096, 64, bias=False)
    reference.weight.data = weights
    reference = reference.to(torch.bfloat16)
    expected = reference(*inputs)
    exact = accuracy.Exact(reference, inputs, CPU)
    rounded_once = (inputs[0].float() @ reference.weight.float().t()).to(torch.bfloat16)
    assert mismatch(expected, rounded_once, Tolerance(), exact) is None
    off = (rounded_once.float() * 1.05).to(torch.bfloat16)
    assert mismatch(expected, off, Tolerance(), exact) is not None


def test_the_record_rows_and_table_name_the_precision(cli: CliRun) -> None:
    solution = toy_solution("good")
    assert cli("--problem", str(TOY), "--solution", solution, "--precision", "bf16") == 0
    record = cli.record("good")
    assert record["status"] == "ok" and record["settings"]["checking"]["precision"] == "bf16"
    table = next((cli.root / "results").glob("*/toy.md")).read_text()
    assert "at bf16" in table.splitlines()[0]


def test_runs_at_two_precisions_are_not_compared_and_keep_apart_folders(tmp_path: Path) -> None:
    at_bf16 = Settings(checking=Checking(precision="bf16"))
    assert at_bf16.results_folder_suffix == "-bf16"
    assert Settings(checking=Checking(precision="fp32")).results_folder_suffix == ""
    kernelbench_fp16 = Checking(profile="kernelbench", precision="fp16")
    assert Settings(checking=kernelbench_fp16).results_folder_suffix == "-kernelbench-fp16"
    old = record("p", "s", [bench(10.0, 20.0)])
    new = replace(record("p", "s", [bench(10.0, 20.0)]), settings=at_bf16)
    for folder, made in (("old", old), ("new", new)):
        (tmp_path / folder).mkdir()
        record_.append(tmp_path / folder, made)
    sides = [comparison.select(str(tmp_path / name)) for name in ("old", "new")]
    with pytest.raises(UserError, match=r"at different precisions \(.*as written.*bf16"):
        comparison.compare_runs(*sides)
