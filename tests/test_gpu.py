"""On a GPU only: CUDA solutions build for the device, run, and fail safely."""

import statistics
from typing import Any

import pytest

import run
from tests.conftest import BUILDS, FIXTURES, REPO, TOY, CliRun, toy_solution
from tests.test_cheats import (
    EXPECTED,
    MEAN,
    PLANTING,
    POINTER_VERDICTS,
    SUBSAMPLE,
    assert_verdict,
    run_cheats,
    run_planting_cheat,
)

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def toy_cuda_run(module_cli: CliRun) -> tuple[int, CliRun]:
    """One run on the GPU: a solution that runs out of GPU memory, then a CUDA kernel (a
    plain-PyTorch one is rejected on a GPU); its exit code and records."""
    solutions = [str(FIXTURES / "faults" / "gpu_out_of_memory.py"), toy_solution("cuda_kernel")]
    args = [a for solution in solutions for a in ("--solution", solution)]
    return module_cli(
        "--problem", str(TOY), *args, "--max-samples", "20", "--timeout", "60"
    ), module_cli


@pytest.mark.alone
def test_running_out_of_gpu_memory_is_a_runtime_error_and_the_next_solution_runs(
    toy_cuda_run: tuple[int, CliRun],
) -> None:
    code, cli = toy_cuda_run
    assert code == run.EXIT_FAILED
    record = cli.record("gpu_out_of_memory")
    assert record["status"] == "runtime_error", record["detail"]
    assert "OutOfMemoryError" in record["detail"] and "\n" not in record["detail"]
    after = cli.record("cuda_kernel")
    assert after["status"] == "ok", after["detail"]


@pytest.mark.alone
def test_cuda_solution_is_built_for_the_gpu_checked_and_timed_with_events(
    toy_cuda_run: tuple[int, CliRun],
) -> None:
    record = toy_cuda_run[1].record("cuda_kernel")
    assert record["status"] == "ok", record["detail"]
    assert record["settings"]["arch"] == record["machine"]["capability"]
    assert record["builds"][0]["cuda"] is True
    for bench in record["benchmarks"]:
        assert bench["solution"]["method"] == "cuda_events"
        assert bench["speedup"]["low"] <= bench["speedup"]["value"] <= bench["speedup"]["high"]
        assert 0 < bench["floor_us"] < 50 and bench["bytes"] > 0
        assert bench["solution"]["synchronizes"] is False  # it only enqueues its kernel
    assert record["ceiling"]["copy_gbps"] > 100


def test_graph_mode_times_replays_over_rotated_inputs(cli) -> None:
    args = ["--problem", str(TOY), "--solution", toy_solution("cuda_kernel"), "--graph"]
    assert cli(*args, "--max-samples", "20") == run.EXIT_OK
    record = cli.record("cuda_kernel")
    assert record["status"] == "ok", record["detail"]
    for bench in record["benchmarks"]:
        assert bench["mode"] == "cuda_graph", bench.get("note")
        assert bench["solution"]["median_us"] > 0


def test_illegal_memory_access_is_a_row_not_a_dead_run(cli) -> None:
    args = [
        "--problem",
        str(TOY),
        "--solution",
        toy_solution("cuda_out_of_bounds"),
        "--solution",
        toy_solution("cuda_kernel"),
        "--max-samples",
        "5",
    ]
    assert cli(*args) == run.EXIT_FAILED
    bad = cli.record("cuda_out_of_bounds")
    assert bad["status"] in ("runtime_error", "crashed")
    assert "illegal memory access" in bad["detail"] or "CUDA" in bad["detail"]
    assert cli.record("cuda_kernel")["status"] == "ok"  # the next solution still ran


# Checked, not timed (scripts/gpu_session.sh's `run` times them): a run.py run per problem, so
# that scripts/gpu_tests.sh runs them side by side.
SHIPPED = sorted(p.name for p in (REPO / "solutions").iterdir() if p.is_dir())


@pytest.mark.parametrize("problem", SHIPPED)
def test_every_shipped_solution_is_correct_on_the_gpu(cli, problem: str) -> None:
    assert cli("--problem", problem, "--check-only") == run.EXIT_OK
    statuses = {r["solution"]: r["status"] for r in cli.records()}
    assert len(statuses) == len(list((REPO / "solutions" / problem).glob("*.py")))
    assert set(statuses.values()) == {"ok"}, statuses


# On the GPU every cheat gets its CPU verdict, except these (and the GPU-only ones).
GPU_EXPECTED = {
    **EXPECTED,
    "calls_reference": ("rejected", "no_own_kernel", "launched no kernel of its own"),
    "side_stream": ("rejected", "late_work", "changed after the call returned"),
    "side_stream_when_timed": ("rejected", "unseen_work", "work the timer did not see"),
    "fig_leaf": ("rejected", "fig_leaf", "launches every kernel the reference launches"),
    "decoy_kernel": ("rejected", "no_own_kernel", "launched no kernel of its own"),
    "installs_at_run_time": ("rejected", "no_own_kernel", "launched no kernel of its own"),
    "token_pasting": ("rejected", "late_work", "changed after the call returned"),
}


GPU_CHEATS = [*GPU_EXPECTED, "replay_by_pointer"]
CHEAT_RUNS = 6  # run.py judges one solution at a time: six runs of a sixth each, side by side


def run_index(name: str) -> int:
    """Which of the CHEAT_RUNS runs judges the cheat `name`."""
    return GPU_CHEATS.index(name) % CHEAT_RUNS


def cheat_run(name: str) -> Any:
    """`name` with the index of the run that judges it, in that run's xdist group."""
    index = run_index(name)
    return pytest.param(index, name, marks=pytest.mark.xdist_group(f"gpu_cheats_{index}"), id=name)


@pytest.fixture(scope="module")
def gpu_cheats(request: pytest.FixtureRequest, tmp_path_factory) -> CliRun:
    """One run.py run of the cheats whose run index is `request.param`."""
    names = [name for name in GPU_CHEATS if run_index(name) == request.param]
    return run_cheats(CliRun(tmp_path_factory.mktemp("cheats"), BUILDS), names)


def judged_by_its_run(*names: str) -> pytest.MarkDecorator:
    """Parametrize a test by `names`, each judged in its run (a module-scoped fixture per run:
    one run.py run per xdist worker); in order of run, so that a serial pytest runs each once."""
    params = [cheat_run(name) for name in sorted(names, key=run_index)]
    return pytest.mark.parametrize(
        ("gpu_cheats", "name"), params, indirect=["gpu_cheats"], scope="module"
    )


@judged_by_its_run(*GPU_EXPECTED)
def test_each_cheat_gets_its_verdict_on_the_gpu(gpu_cheats: CliRun, name: str) -> None:
    record = gpu_cheats.record(name)
    assert record["settings"]["device"] == "cuda:0"
    assert_verdict(record, GPU_EXPECTED[name])


@judged_by_its_run("replay_by_pointer")
def test_replaying_by_address_is_caught_on_the_gpu(gpu_cheats: CliRun, name: str) -> None:
    record = gpu_cheats.record(name)
    assert (record["status"], record.get("reason")) in POINTER_VERDICTS, record["detail"]


def test_modules_a_solution_plants_are_rejected_and_removed_on_the_gpu(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert_verdict(run_planting_cheat(tmp_path, monkeypatch, "--sandbox", "off"), PLANTING)


def test_a_subsampled_reduction_is_caught_on_the_gpu(cli: CliRun) -> None:
    args = ["--problem", str(MEAN), "--solution", str(SUBSAMPLE), "--max-samples", "20"]
    cli(*args, "--trials", "2")
    record = cli.record("subsample_mean")
    assert record["settings"]["device"] == "cuda:0"
    assert_verdict(record, ("incorrect", None, "case 'spike'"))


def test_calling_torch_multilabel_margin_loss_is_rejected(cli: CliRun) -> None:
    solution = FIXTURES / "cheats_multilabel" / "calls_torch_loss.py"
    args = ["--problem", "multilabel_margin", "--solution", str(solution), "--max-samples", "5"]
    assert cli(*args, "--trials", "1") == run.EXIT_FAILED
    record = cli.record("calls_torch_loss")
    assert (record["status"], record.get("reason")) == ("rejected", "no_own_kernel")
    assert "multilabel_margin_loss" in record["detail"]


def test_an_honest_long_matvec_kernel_is_judged_against_the_exact_answer(cli: CliRun) -> None:
    # Issue 12: on this shape a float32 kernel summing in another order than cuBLAS was
    # `incorrect` against the dtype tolerance (largest error 5.8e-4), cuBLAS erring as much.
    solution = FIXTURES / "long_matvec_solutions" / "cuda_rows.py"
    args = ["--problem", str(FIXTURES / "long_matvec"), "--solution", str(solution)]
    assert cli(*args, "--trials", "5", "--max-samples", "20") == run.EXIT_OK
    record = cli.record("cuda_rows")
    assert record["status"] == "ok", record["detail"]
    assert record["checks"] >= 15


@pytest.mark.alone
def test_ncu_counts_an_honest_kernels_bytes_and_flags_a_sub_batch(cli: CliRun) -> None:
    honest = ["--problem", str(TOY), "--solution", toy_solution("cuda_kernel")]
    assert cli(*honest, "--ncu", "--trials", "1", "--max-samples", "20") == run.EXIT_OK
    record = cli.record("cuda_kernel")
    assert record["status"] == "ok", record["detail"]
    for bench in record["benchmarks"]:
        witness = bench["witness"]
        assert witness["kernels"] >= 1
        moved = witness["dram_read"] + max(witness["dram_write"], witness["l2_write"])
        assert bench["bytes"] <= moved <= 1.5 * bench["bytes"] + 65536, (witness, bench["bytes"])
    cheat = FIXTURES / "cheats_mean" / "first_quarter_cuda.py"
    args = ["--problem", str(FIXTURES / "toy_level"), "--solution", str(cheat), "--ncu"]
    assert cli(*args, "--trials", "2", "--max-samples", "20") == run.EXIT_OK
    record = cli.record("first_quarter_cuda")
    assert record["status"] == "ok", record["detail"]  # every check passes ...
    large = record["benchmarks"][-1]
    assert large["witness"]["dram_read"] < 0.3 * large["bytes"]  # ... but a quarter is read
    table = next((cli.root / "results").glob("*/toy_level.md")).read_text()
    assert "MOVED 2" in table and "% of the problem's minimum bytes under ncu" in table


@pytest.mark.alone
def test_a_solution_that_synchronizes_is_flagged_and_timed_as_it_runs_in_a_loop(cli) -> None:
    """One run times the four ways a call can wait for the device, a benchmark shape each."""
    solution = toy_solution("cuda_synchronizes")
    args = ["--problem", str(FIXTURES / "toy_sync"), "--solution", solution]
    assert cli(*args, "--max-samples", "200") == run.EXIT_OK
    record = cli.record("cuda_synchronizes")
    assert record["status"] == "ok", record["detail"]
    assert [b["name"] for b in record["benchmarks"]] == ["default", "device", "item", "cpu", "copy"]
    for bench in record["benchmarks"]:
        assert bench["solution"]["synchronizes"] is True, bench["name"]
        assert bench["reference"]["synchronizes"] is False, bench["name"]
    table = next((cli.root / "results").glob("*/toy_sync.md")).read_text()
    assert "solution synchronizes with the device" in table
    # The timed figure is what a loop of such calls costs per call: within 10% over the five
    # rows (their median ratio), and every row within 35% (the host's noise moves a row of 30 us
    # by a quarter now and then; with one warm call the median ratio was 1.09-1.32 on the H200).
    ratios = {b["name"]: b["solution"]["median_us"] / b["wall_us"] for b in record["benchmarks"]}
    assert abs(statistics.median(ratios.values()) - 1) <= 0.1, ratios
    assert all(abs(ratio - 1) <= 0.35 for ratio in ratios.values()), ratios


PRIMARY_CONTEXTS = """
import ctypes, sys
import run
code = run.main(sys.argv[1:])
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0
count = ctypes.c_int()
cuda.cuDeviceGetCount(ctypes.byref(count))
active = []
for index in range(count.value):
    device, flags, state = ctypes.c_int(), ctypes.c_uint(), ctypes.c_int()
    cuda.cuDeviceGet(ctypes.byref(device), index)
    cuda.cuDevicePrimaryCtxGetState(device, ctypes.byref(flags), ctypes.byref(state))
    active.append(state.value)
print("exit", code, "active", active)
"""


def test_the_parent_makes_no_cuda_context_during_a_run(tmp_path) -> None:
    """The audit, the ceiling, the baseline and the judging all run in workers: the process
    of run.py never holds a context on any GPU (the driver's primary context state, read after
    a whole run with a CUDA solution, the ceiling measured and --compile)."""
    import subprocess
    import sys

    args = ["--problem", str(TOY), "--solution", toy_solution("cuda_kernel"), "--compile"]
    args += ["--max-samples", "5", "--results-dir", str(tmp_path), "--log-dir", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, "-c", PRIMARY_CONTEXTS, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("exit 0 active ") and "1" not in last.split("active")[1], last
