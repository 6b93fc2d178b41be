"""Known-wrong solutions (tests/fixtures/cheats/) each get the exact verdict they earn.

Every fixture runs through run.py in its own worker, as any solution would, on the toy problem
y = x * scale + 1. The GPU-only fixtures, and the GPU's own verdicts, are in tests/test_gpu.py.
"""

from __future__ import annotations

import pytest
import torch

from harness import status
from harness.errors import Verdict
from harness.loading import import_file, load_problem
from harness.measure.checking import check_cases
from harness.settings import Checking
from tests.conftest import FIXTURES, REPO, TOY, CliRun

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
}
# Replaying by address is caught by whichever check first sees an address come back: the
# second call of a check (nondeterministic) or a timed call's spot check (incorrect). Which
# one depends on where the allocator puts the copies; both are failures, each named.
POINTER_VERDICTS = {("incorrect", None), ("rejected", "nondeterministic")}
FLAGGED = "calls_reference"  # not rejected on a CPU, but flagged: see test_gpu for the GPU
GPU_ONLY = ("side_stream", "side_stream_when_timed", "fig_leaf")


def test_every_fixture_has_an_expected_verdict() -> None:
    names = {path.stem for path in CHEATS.glob("*.py")}
    assert names == {*EXPECTED, "replay_by_pointer", FLAGGED, *GPU_ONLY}


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


@pytest.fixture(scope="module")
def cheats_run(module_cli: CliRun) -> CliRun:
    return run_cheats(module_cli, [*EXPECTED, "replay_by_pointer", FLAGGED], "--device", "cpu")


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_cheat_gets_its_verdict(cheats_run: CliRun, name: str) -> None:
    assert_verdict(cheats_run.record(name), EXPECTED[name])


def test_replaying_by_address_is_caught(cheats_run: CliRun) -> None:
    record = cheats_run.record("replay_by_pointer")
    assert (record["status"], record.get("reason")) in POINTER_VERDICTS, record["detail"]


def test_calling_the_references_operators_is_flagged(cheats_run: CliRun) -> None:
    record = cheats_run.record(FLAGGED)
    assert record["status"] == "ok"
    assert "calls the reference's own operator(s) aten::add, aten::mul" in record["warnings"]
    assert "built no extension: its work is PyTorch's own" in record["warnings"]
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
    assert caught.value.status == status.INCORRECT


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
    from harness.run.scan import scan

    for path in sorted((REPO / "solutions").rglob("*.py")):
        assert scan(path) == [], path
