"""Judged as KernelBench judges: the reference's own mode, the random-reference rule, the
KernelBench profile's criterion and timer, and the per-call speedup beside the device one."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch

from harness import codec, stats, verdicts
from harness import record as record_
from harness import settings as settings_
from harness.loading import Problem, import_file, load_problem
from harness.measure import benchmarking, checking, kernelbench
from harness.measure import timing as timing_
from harness.measure.audit import WEAK, audit_problem
from harness.record import BenchRow
from harness.results import comparison, report
from harness.settings import KERNELBENCH, Checking, Settings, StopRule
from harness.stats import PerCall
from harness.verdicts import UserError, Verdict
from tests.conftest import FIXTURES, REPO, TOY, CliRun
from tests.records_factory import bench, record, timing

CPU = torch.device("cpu")
MODES = FIXTURES / "modes"
SOLUTIONS = FIXTURES / "modes_solutions"
AS_HARNESS = Checking()
AS_KERNELBENCH = Checking(profile=KERNELBENCH)


def problem(name: str) -> Problem:
    return load_problem(name, MODES / f"{name}.py")


def judged(problem_name: str, solution: str, how: Checking = AS_HARNESS) -> str | None:
    """None when the solution passes every check, else the verdict's status and detail."""
    model_new = import_file(SOLUTIONS / f"{solution}.py").ModelNew
    try:
        checking.check_cases(
            problem(problem_name), model_new, CPU, dataclasses.replace(how, trials=2)
        )
    except Verdict as verdict:
        return f"{verdict.status}: {verdict.detail}"
    return None


# The reference's own mode ------------------------------------------------------------------


@pytest.mark.parametrize("profile", [AS_HARNESS, AS_KERNELBENCH], ids=["harness", "kernelbench"])
def test_running_statistics_are_wrong_for_a_batchnorm_in_training_mode(profile: Checking) -> None:
    verdict = judged("batchnorm", "running_stats", profile)
    assert verdict is not None and verdict.startswith(verdicts.INCORRECT)
    assert "the reference runs in training mode" in verdict
    assert "BatchNorm2d at 'bn'" in verdict and "self.eval()" in verdict


@pytest.mark.parametrize("profile", [AS_HARNESS, AS_KERNELBENCH], ids=["harness", "kernelbench"])
def test_an_honest_training_mode_batchnorm_passes(profile: Checking) -> None:
    assert judged("batchnorm", "batch_stats", profile) is None


def test_a_problem_that_calls_eval_is_judged_in_inference_mode() -> None:
    assert judged("batchnorm_inference", "running_stats") is None
    verdict = judged("batchnorm_inference", "batch_stats")
    assert verdict is not None and verdict.startswith(verdicts.INCORRECT)
    assert "training mode" not in verdict  # nothing in the reference is in training mode


def test_the_solution_runs_in_the_reference_mode_whatever_its_constructor_says() -> None:
    class EvalsItself(torch.nn.Module):
        def __init__(self, num_features: int) -> None:
            super().__init__()
            self.bn = torch.nn.BatchNorm2d(num_features)
            self.eval()  # would normalize with the running statistics

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.bn(x)

    case = problem("batchnorm").cases[0]
    reference, solution = checking.build_models(problem("batchnorm"), EvalsItself, case, 1, CPU)
    assert reference.training and solution.training and solution.bn.training


def test_dropout_with_p_zero_is_judged_like_any_layer() -> None:
    assert judged("dropout", "linear") is None
    assert not [f for f in audit_problem(problem("dropout"), CPU) if f.level == WEAK]


def test_a_random_reference_is_flagged_by_the_audit_naming_its_module() -> None:
    findings = audit_problem(problem("dropout_random"), CPU)
    (random,) = [f for f in findings if f.check == "random"]
    assert random.level == WEAK
    assert "Dropout at 'drop'" in random.message and "self.eval()" in random.message


def test_both_sides_see_the_same_random_numbers_on_the_same_seed() -> None:
    class Noisy(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.randn_like(x)

    noisy = dataclasses.replace(load_problem("noisy", MODES / "dropout.py"), model=Noisy)
    case = dataclasses.replace(noisy.cases[0], get_init_inputs=lambda: [])
    models = checking.build_models(noisy, Noisy, case, 1, CPU)
    inputs = [torch.randn(4, 4)]
    assert checking.check_once(noisy, case, models, inputs, CPU, Checking(), seed=7) is None


# The KernelBench profile -------------------------------------------------------------------


def test_kernelbench_criterion_is_allclose_at_its_precision_table() -> None:
    expected = torch.linspace(1, 2, 100)
    assert kernelbench.mismatch(expected, expected * (1 + 5e-5)) is None
    report_ = kernelbench.mismatch(expected, expected * (1 + 1e-3))
    assert report_ is not None and "atol = rtol = 0.0001" in report_
    assert kernelbench.mismatch(expected, expected * (1 + 1e-3), override=1e-2) is None
    half = expected.half()
    assert kernelbench.mismatch(half, half * (1 + 5e-3)) is None  # 1e-2 for float16


def test_kernelbench_criterion_fails_nan_shape_and_dtype_differences() -> None:
    nan = torch.tensor([1.0, float("nan")])
    assert "fail KernelBench's allclose" in (kernelbench.mismatch(nan, nan.clone()) or "")
    assert "shape" in (kernelbench.mismatch(torch.ones(2, 3), torch.ones(3, 2)) or "")
    assert "dtype" in (kernelbench.mismatch(torch.ones(2), torch.ones(2).double()) or "")
    assert kernelbench.mismatch((torch.ones(2), 3.0), (torch.ones(2), torch.tensor(3.0))) is None


def test_the_profile_replaces_the_tolerance_not_the_checks() -> None:
    class OffByATenth(torch.nn.Module):  # 1e-3 relative: outside 1e-4, inside 1e-2
        def __init__(self, num_features: int) -> None:
            super().__init__()
            self.bn = torch.nn.BatchNorm2d(num_features)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.bn(x) * (1 + 1e-3)

    bn = problem("batchnorm")
    looser = dataclasses.replace(AS_KERNELBENCH, kernelbench_tolerance=1e-2, trials=1)
    with pytest.raises(Verdict, match="KernelBench's allclose"):
        checking.check_cases(bn, OffByATenth, CPU, dataclasses.replace(AS_KERNELBENCH, trials=1))
    assert checking.check_cases(bn, OffByATenth, CPU, looser) == 1


class SumInDouble(torch.nn.Module):
    """sum_reduce accumulated in float64: more exact than the float32 reference."""

    def __init__(self, dim: int = 1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.double().sum(self.dim).float()


def test_the_profile_grounds_the_problems_own_cases_in_float64_as_the_default_does() -> None:
    """KernelBench judges its own inputs (the default case) by its allclose; a problem's extra
    CASES are the harness's, judged by its rule, so a solution more exact than the float32
    reference on an ill-conditioned one is not failed for it."""
    sums = load_problem("sum_reduce", REPO / "problems" / "sum_reduce" / "reference.py")
    cancelling = dataclasses.replace(AS_KERNELBENCH, trials=1, case="cancelling dim 1")
    assert checking.check_cases(sums, SumInDouble, CPU, cancelling) == 1
    default = checking.criterion(
        sums, sums.cases[0], AS_KERNELBENCH, sums.model(), [torch.ones(2, 3)], CPU
    )
    report = default(torch.ones(3), torch.ones(3) * (1 + 1e-3))
    assert report is not None and "KernelBench's allclose" in report


class FakeTimer:
    """KernelBenchTimer's interface over a fixed time per call, counting what it was asked."""

    method = "kernelbench"

    def __init__(self, times_us: dict[Any, float]) -> None:
        self.times_us = times_us
        self.order: list[Any] = []
        self.warmed: list[Any] = []

    def warm_up(self, call: Any) -> None:
        self.warmed.append(call)

    def run(self, calls: list[Any]) -> list[float]:
        self.order += calls
        return [self.times_us[call] + i for i, call in enumerate(calls)]


def test_kernelbench_timing_takes_the_solution_first_then_the_mean_of_100() -> None:
    def reference() -> None: ...
    def solution() -> None: ...

    timer = FakeTimer({reference: 300.0, solution: 100.0})
    sampled = kernelbench.sample({"reference": reference, "solution": solution}, CPU, timer)
    assert timer.warmed == [solution, reference]
    assert timer.order == [solution] * 101 + [reference] * 101
    measured = sampled.measurements
    assert measured["solution"].count == kernelbench.TRIALS == 100
    assert measured["solution"].times_us[0] == 101.0  # the first of 101 discarded
    assert sampled.stop == "kernelbench" and measured["reference"].method == "kernelbench"
    ratio = stats.mean_ratio(measured["reference"].times_us, measured["solution"].times_us)
    assert ratio.value == pytest.approx(350.5 / 150.5)
    assert ratio.low < ratio.value < ratio.high


def test_kernelbench_trials_sets_the_calls_per_side_after_the_discarded_one() -> None:
    def reference() -> None: ...
    def solution() -> None: ...

    timer = FakeTimer({reference: 300.0, solution: 100.0})
    calls = {"reference": reference, "solution": solution}
    sampled = kernelbench.sample(calls, CPU, timer, trials=7)
    assert timer.order == [solution] * 8 + [reference] * 8
    assert sampled.measurements["reference"].times_us == tuple(301.0 + i for i in range(7))
    assert sampled.batches == [7]


def test_kernelbench_settings_refuse_graph_mode_and_a_stray_tolerance() -> None:
    with pytest.raises(ValueError, match="no --graph"):
        Settings(checking=AS_KERNELBENCH, timing=settings_.Timing(graph=True))
    for stray in ({"kernelbench_tolerance": 1e-2}, {"kernelbench_trials": 1000}):
        with pytest.raises(ValueError, match="goes with --as kernelbench"):
            Checking(**stray)
    with pytest.raises(ValueError, match="at least 1"):
        dataclasses.replace(AS_KERNELBENCH, kernelbench_trials=0)
    assert Settings(checking=AS_KERNELBENCH).results_folder_suffix == "-kernelbench"
    assert Settings().results_folder_suffix == ""


def test_comparing_runs_of_two_profiles_is_refused(tmp_path: Path) -> None:
    kb = Settings(checking=AS_KERNELBENCH)
    old = record("p", "s", [bench(10.0, 20.0)])
    new = dataclasses.replace(record("p", "s", [bench(10.0, 20.0)]), settings=kb)
    for folder, made in (("old", old), ("new", new)):
        (tmp_path / folder).mkdir()
        record_.append(tmp_path / folder, made)
    sides = [comparison.select(str(tmp_path / name)) for name in ("old", "new")]
    with pytest.raises(UserError, match="different profiles"):
        comparison.compare_runs(*sides)


# The per-call speedup ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("device", "per_call", "side"),
    [(1.5, 2.0, "reference"), (1.5, 1.0, "solution"), (1.5, 1.6, None), (1.5, 1.4, None)],
)
def test_the_host_bound_side_is_named_where_the_speedups_part(
    device: float, per_call: float, side: str | None
) -> None:
    assert benchmarking.host_bound(device, per_call) == side


def test_per_call_sampling_is_looser_and_shorter_than_the_device_time() -> None:
    rule = StopRule()
    looser = benchmarking.per_call_rule(rule)
    assert looser.budget_ms == rule.budget_ms / 4
    assert looser.max_samples <= benchmarking.PER_CALL_MAX_SAMPLES
    assert looser.target_rse >= rule.target_rse


def test_a_row_carries_its_per_call_speedup_through_the_log_table_and_csv() -> None:
    row = bench(100.0, 150.0)
    per_call = PerCall(timing(180.0, 1), timing(100.0, 2), stats.Interval(1.8, 1.7, 1.9))
    row = dataclasses.replace(row, per_call=per_call, host_bound="reference")
    assert codec.decode(BenchRow, codec.encode(row)) == row
    rows = report.table_rows([record("p", "s", [row])])
    assert rows[0].per_call_speedup == 1.8 and rows[0].host_bound == "reference"
    found = "; ".join(report.flags(row, rows[0], report.bench_speedup(row)))
    assert found == rows[0].flags
    assert "host-bound reference: 1.80x per call against 1.50x on the device" in found
    assert "1.80x [1.70, 1.90]" in report.markdown_table(rows)
    assert {"per_call_speedup", "host_bound", "ref_per_call_us"} <= set(report.CSV_COLUMNS)


# Through run.py --------------------------------------------------------------------------


def test_run_as_kernelbench_records_the_profile_apart_and_marks_a_defence(cli: CliRun) -> None:
    solutions = [
        a
        for s in ("running_stats", "batch_stats")
        for a in ("--solution", str(SOLUTIONS / f"{s}.py"))
    ]
    common = ("--as", "kernelbench", "--check-only", "--device", "cpu", "--trials", "2")
    cli("--problem", str(MODES / "batchnorm.py"), *solutions, *common)
    cli(
        "--problem", str(TOY), "--solution", str(FIXTURES / "cheats" / "input_mutation.py"), *common
    )
    assert [p.name for p in (cli.root / "results").iterdir()] == ["cpu-kernelbench"]
    wrong, honest, cheat = (
        cli.record(s) for s in ("running_stats", "batch_stats", "input_mutation")
    )
    assert (wrong["status"], honest["status"], cheat["status"]) == ("incorrect", "ok", "rejected")
    assert "KernelBench's allclose" in wrong["detail"] and "training mode" in wrong["detail"]
    assert kernelbench.DEFENCE_NOTE in cheat["detail"]
    assert {r["settings"]["checking"]["profile"] for r in cli.records()} == {KERNELBENCH}
    page = (cli.root / "results" / "cpu-kernelbench" / "batchnorm.md").read_text()
    assert "Judged by KernelBench's allclose criterion" in page


# On the GPU --------------------------------------------------------------------------------


@pytest.mark.alone
@pytest.mark.gpu
def test_per_call_time_includes_the_host_time_of_many_launches() -> None:
    device = torch.device("cuda")
    x = torch.randn(1024, device=device)

    def many_launches() -> torch.Tensor:
        y = x
        for _ in range(50):
            y = y + 1
        return y

    rule = StopRule(warmup_ms=5, min_samples=20, max_samples=100, budget_ms=300)
    timers = {"device": timing_.CudaTimer(device), "per_call": timing.PerCallTimer(device)}
    medians = {
        name: timing_.sample({"call": many_launches}, timer, rule).measurements["call"].median_us
        for name, timer in timers.items()
    }
    assert medians["per_call"] > 1.5 * medians["device"], medians


@pytest.mark.gpu
def test_each_per_call_sample_follows_an_untimed_warm_call_after_its_inputs_are_prepared() -> None:
    device = torch.device("cuda")
    x = torch.randn(1024, device=device)
    seen: list[str] = []

    class Fed:  # the parts of harness.measure.feeding.Feed the timer calls
        def prepare(self) -> None:
            seen.append("prepare")

        def warm(self) -> None:
            seen.append("warm")

        def __call__(self) -> torch.Tensor:
            seen.append("call")
            return x + 1

    times = timing.PerCallTimer(device).run([Fed(), Fed()])
    assert seen == ["prepare", "warm", "call"] * 2 and len(times) == 2


@pytest.mark.alone
@pytest.mark.gpu
def test_the_kernelbench_timer_gives_a_mean_of_100_calls_per_side() -> None:
    device = torch.device("cuda")
    x = torch.randn(1 << 24, device=device)
    calls = {"reference": lambda: x.mul(2).mul(2), "solution": lambda: x.mul(2)}
    measured = kernelbench.sample(calls, device).measurements
    solution, reference = measured["solution"], measured["reference"]
    assert solution.count == reference.count == 100
    assert 0 < solution.mean_us < reference.mean_us
