"""On a GPU only: CUDA solutions build for the device, run, and fail safely."""

from pathlib import Path

import pytest

import run
from tests.conftest import REPO, TOY, CliRun, toy_solution

pytestmark = pytest.mark.gpu


@pytest.fixture
def gpu_cli(tmp_path: Path) -> CliRun:
    # Shares run.py's default build cache, so the shipped solutions built by an earlier
    # `run.py --all` in the same session are not built again.
    return CliRun(tmp_path, REPO / ".cache" / "builds")


def test_cuda_solution_is_built_for_the_gpu_checked_and_timed_with_events(gpu_cli) -> None:
    args = ["--problem", str(TOY), "--solution", toy_solution("cuda_kernel"), "--max-samples", "20"]
    assert gpu_cli(*args) == run.EXIT_OK
    record = gpu_cli.record("cuda_kernel")
    assert record["status"] == "ok", record["detail"]
    assert record["settings"]["arch"] == record["machine"]["capability"]
    assert record["builds"][0]["cuda"] is True
    for bench in record["benchmarks"]:
        assert bench["solution"]["method"] == "cuda_events"
        assert bench["speedup"]["low"] <= bench["speedup"]["value"] <= bench["speedup"]["high"]
        assert 0 < bench["floor_us"] < 50 and bench["bytes"] > 0
    assert record["ceiling"]["copy_gbps"] > 100


def test_graph_mode_times_replays_over_rotated_inputs(gpu_cli) -> None:
    args = ["--problem", str(TOY), "--solution", toy_solution("cuda_kernel"), "--graph"]
    assert gpu_cli(*args, "--max-samples", "20") == run.EXIT_OK
    record = gpu_cli.record("cuda_kernel")
    assert record["status"] == "ok", record["detail"]
    for bench in record["benchmarks"]:
        assert bench["mode"] == "cuda_graph", bench.get("note")
        assert bench["solution"]["median_us"] > 0


def test_illegal_memory_access_is_a_row_not_a_dead_run(gpu_cli) -> None:
    args = [
        "--problem",
        str(TOY),
        "--solution",
        toy_solution("cuda_out_of_bounds"),
        "--solution",
        toy_solution("good"),
        "--max-samples",
        "5",
    ]
    assert gpu_cli(*args) == run.EXIT_FAILED
    bad = gpu_cli.record("cuda_out_of_bounds")
    assert bad["status"] in ("runtime_error", "crashed")
    assert "illegal memory access" in bad["detail"] or "CUDA" in bad["detail"]
    assert gpu_cli.record("good")["status"] == "ok"  # the next solution still ran


def test_every_shipped_solution_is_correct_on_the_gpu(gpu_cli) -> None:
    assert gpu_cli("--all", "--max-samples", "20", "--budget-ms", "200") == run.EXIT_OK
    statuses = {(r["problem"], r["solution"]): r["status"] for r in gpu_cli.records()}
    assert set(statuses.values()) == {"ok"}, statuses
