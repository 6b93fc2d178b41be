"""Known-wrong solutions (tests/fixtures/cheats/) each get the exact verdict they earn.

Every fixture runs through run.py in its own worker, as any solution would, on the toy problem
y = x * scale + 1. The GPU-only fixtures, and the GPU's own verdicts, are in tests/test_gpu.py.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from harness import verdicts
from harness.loading import import_file, load_problem
from harness.measure.checking import check_cases
from harness.run import staging
from harness.settings import Checking
from harness.verdicts import Verdict
from tests.conftest import BUILDS, FIXTURES, REPO, TOY, CliRun

CHEATS = FIXTURES / "cheats"

# fixture: (status, the rule broken (rejections only), a phrase of the detail)
EXPECTED = {
    "stale_memory": ("incorrect", None, "case 'default'"),
    "partial_write": ("incorrect", None, "1056 of 2112 elements differ"),
    "input_mutation": ("rejected", "input_mutated", "the call wrote to input 0"),
    "returns_input_view": ("rejected", "output_aliases_input", "shares memory with an input"),
    "replay_by_shape": ("incorrect", None, "case 'default'"),
    "replay_by_content": ("incorrect", None, "benchmark 'default', timed call"),
    "background_thread": ("rejected", "late_work", "changed after the call returned"),
    "lazy_tensor": ("rejected", "not_a_tensor", "returned a LazyResult"),
    "default_shape_only": ("incorrect", None, "case '5x7'"),
    "public_seeds_only": ("incorrect", None, "case 'default'"),
    "racy": ("rejected", "nondeterministic", "wrong on a second call on the same inputs"),
    "low_precision": ("incorrect", None, "max rel err"),
    "returns_nan": ("incorrect", None, "differ in NaN/inf"),
    "replaces_event": ("rejected", "timer_replaced", "torch.cuda.Event was replaced"),
    "replaces_synchronize": ("rejected", "timer_replaced", "torch.cuda.synchronize was replaced"),
    "replaces_clock": ("rejected", "timer_replaced", "time.perf_counter was replaced"),
    "replaces_comparison": ("rejected", "harness_replaced", "mismatch was replaced"),
    "prints_a_verdict": ("incorrect", None, "case 'default'"),
    # The exploits public benchmarks met since (issue 12): reading the harness's own state ...
    "gc_zeroes_copies": (
        "rejected",
        "harness_data_changed",
        "the harness's copy of the inputs changed during the call",
    ),
    "expected_from_frames": ("incorrect", None, "benchmark 'default', timed call"),
    # ... behaving differently when timed ...
    # (only a random spot check inside the timing loop sees it, the last forced checks run
    # outside; with 20 samples a benchmark misses it about 7% of the time: the next one's catches)
    "wrong_when_timed": ("incorrect", None, "', timed call"),
    "wrong_after_the_checks": ("incorrect", None, "timed call"),
    "right_only_when_checked": ("incorrect", None, "benchmark 'default', timed call"),
    "precomputes_timed_calls": ("incorrect", None, "benchmark 'default', timed call"),
    # ... a decoy kernel (on a GPU: rejected, see test_gpu) ...
    "decoy_kernel": ("no_gpu", None, "not compiled: no CUDA device here"),
    # ... and names hidden from the static scan (shadowing modules: PLANTING, below).
    "hides_names": ("rejected", "timer_replaced", "time.perf_counter was replaced"),
}
# Replaying by address is caught by whichever check first sees an address come back: the
# second call of a check (nondeterministic) or a timed call's spot check (incorrect). Which
# one depends on where the allocator puts the copies; both are failures, each named.
POINTER_VERDICTS = {("incorrect", None), ("rejected", "nondeterministic")}
# Not rejected on a CPU, but flagged (see test_gpu for the GPU): fixture -> warnings it gets.
FLAGGED = {
    "calls_reference": [
        "calls the reference's own operator(s) aten::add, aten::mul",
        "built no extension: its work is PyTorch's own",
    ],
    "installs_at_run_time": [
        "source: starts processes (an install at run time?) (line 5)",
        "source: reaches into the import path (sys.path) (line 20)",
        "calls the reference's own operator(s) aten::add, aten::mul",
    ],
}
GPU_ONLY = ("side_stream", "side_stream_when_timed", "fig_leaf", "token_pasting")


def test_every_fixture_has_an_expected_verdict() -> None:
    names = {path.stem for path in CHEATS.glob("*.py")}
    assert names == {*EXPECTED, "replay_by_pointer", "plants_modules", *FLAGGED, *GPU_ONLY}


def run_cheats(cli: CliRun, names: list[str], *flags: str) -> CliRun:
    """Every named cheat through run.py on the toy problem, in one run."""
    args = [a for name in names for a in ("--solution", str(CHEATS / f"{name}.py"))]
    cli("--problem", str(TOY), *args, "--max-samples", "20", "--trials", "2", *flags)
    return cli


def assert_verdict(record: dict, wanted: tuple[str, str | None, str]) -> None:
    wanted_status, reason, phrase = wanted
    assert (record["status"], record.get("reason")) == (wanted_status, reason), record["detail"]
    assert phrase in record["detail"]
    assert record["benchmarks"] == []  # no timings for a failed solution


# plants_modules writes a torch.py into the working folder and a numpy.py beside itself, where
# every later process would import them. It runs from a copy in a folder of its own, that folder
# its working folder, so that no run beside it (pytest-xdist, scripts/gpu_tests.sh) imports its
# modules or sees them appear; the run must reject it and remove both.
PLANTING = ("rejected", "planted_module", "torch.py")
PLANTING_SANDBOXED = ("rejected", "sandbox_filesystem", "torch.py")


def run_planting_cheat(root: Path, monkeypatch: pytest.MonkeyPatch, *flags: str) -> dict:
    """plants_modules through run.py from its own folder under `root`; its record, once the
    test has checked that the modules it planted are gone."""
    folder = root / "planting"
    folder.mkdir()
    solution = Path(shutil.copy(CHEATS / "plants_modules.py", folder))
    monkeypatch.chdir(folder)
    cli = CliRun(root, BUILDS)
    cli("--problem", str(TOY), "--solution", str(solution), "--max-samples", "20", *flags)
    for planted in (folder / "torch.py", folder / "numpy.py"):
        assert not planted.exists(), planted
    return cli.record("plants_modules")


@pytest.fixture(scope="module")
def cheats_run(module_cli: CliRun) -> CliRun:
    return run_cheats(module_cli, [*EXPECTED, "replay_by_pointer", *FLAGGED], "--device", "cpu")


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_cheat_gets_its_verdict(cheats_run: CliRun, name: str) -> None:
    assert_verdict(cheats_run.record(name), EXPECTED[name])


def test_replaying_by_address_is_caught(cheats_run: CliRun) -> None:
    record = cheats_run.record("replay_by_pointer")
    assert (record["status"], record.get("reason")) in POINTER_VERDICTS, record["detail"]


@pytest.mark.parametrize("name", list(FLAGGED))
def test_work_that_is_not_the_solutions_own_is_flagged(cheats_run: CliRun, name: str) -> None:
    record = cheats_run.record(name)
    assert record["status"] == "ok", record["detail"]
    for warning in FLAGGED[name]:
        assert warning in record["warnings"]
    for bench in record["benchmarks"]:
        assert bench["spot_checks"] >= 2  # timed calls were checked too
        assert bench["wall_us"] > 0


def test_a_timed_call_cheat_is_caught_only_by_the_spot_checks(cheats_run: CliRun) -> None:
    """replay_by_content passes every correctness check: only the timed path exposes it."""
    assert "timed call" in cheats_run.record("replay_by_content")["detail"]


def test_the_secret_is_recorded_so_a_run_can_be_replayed(cheats_run: CliRun) -> None:
    secrets = {r["settings"]["checking"]["secret"] for r in cheats_run.records()}
    assert len(secrets) == 1 and next(iter(secrets)) > 0


def test_only_the_secret_exposes_a_solution_tuned_to_the_public_seeds() -> None:
    problem = load_problem("toy", TOY / "reference.py")
    model_new = import_file(CHEATS / "public_seeds_only.py").ModelNew
    cpu = torch.device("cpu")
    assert check_cases(problem, model_new, cpu, Checking(trials=5, seed=42, secret=0)) == 15
    with pytest.raises(Verdict) as caught:
        check_cases(problem, model_new, cpu, Checking(trials=5, seed=42, secret=1234))
    assert caught.value.status == verdicts.INCORRECT


def test_calling_torch_multilabel_margin_loss_is_flagged_on_cpu(module_cli: CliRun) -> None:
    solution = FIXTURES / "cheats_multilabel" / "calls_torch_loss.py"
    module_cli(
        "--problem", "multilabel_margin", "--solution", str(solution), "--device", "cpu",
        "--max-samples", "3", "--trials", "1",
    )  # fmt: skip
    record = module_cli.record("calls_torch_loss")
    assert record["status"] == "ok", record["detail"]
    assert "aten::multilabel_margin_loss" in record["warnings"][0]


def test_the_shipped_solutions_raise_no_source_warnings() -> None:
    from harness.run.discovery import scan

    for path in sorted((REPO / "solutions").rglob("*.py")):
        assert scan(path) == [], path


@pytest.mark.parametrize(
    ("sandbox", "verdict"), [("off", PLANTING), ("auto", PLANTING_SANDBOXED)], ids=["off", "auto"]
)
def test_modules_a_solution_plants_are_rejected_and_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sandbox: str, verdict: tuple
) -> None:
    # In the sandbox the planting fails (its folder is not writable) and is named; without
    # one, the modules are planted, then found and removed.
    if sandbox == "auto" and staging.missing():
        verdict = PLANTING
    flags = ("--device", "cpu", "--sandbox", sandbox)
    assert_verdict(run_planting_cheat(tmp_path, monkeypatch, *flags), verdict)


MEAN = FIXTURES / "toy_mean"
SUBSAMPLE = FIXTURES / "cheats_mean" / "subsample_mean.py"


def test_a_subsampled_reduction_fails_the_case_designed_against_it(module_cli: CliRun) -> None:
    module_cli(
        "--problem", str(MEAN), "--solution", str(SUBSAMPLE), "--device", "cpu",
        "--max-samples", "20", "--trials", "2",
    )  # fmt: skip
    assert_verdict(module_cli.record("subsample_mean"), ("incorrect", None, "case 'spike'"))


def test_without_that_case_the_tolerance_alone_lets_a_subsample_through() -> None:
    """The known gap docs/anticheat.md names: on a smooth 256x256 input the mean of every 4th
    element is within float32's tolerance, so only a case designed against it catches the
    shortcut."""
    problem = load_problem("toy_mean", MEAN / "reference.py")
    model_new = import_file(SUBSAMPLE).ModelNew
    cpu, checking = torch.device("cpu"), Checking(trials=5, seed=42, secret=0)
    smooth = replace(problem.benchmarks[1], name="smooth 256x256")
    assert check_cases(replace(problem, cases=(problem.cases[0], smooth)), model_new, cpu, checking)
    with pytest.raises(Verdict) as caught:
        check_cases(problem, model_new, cpu, checking)
    assert caught.value.status == verdicts.INCORRECT and "case 'spike'" in caught.value.detail
