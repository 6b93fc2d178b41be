"""Roofline counts and the cached ceiling, the compile-baseline cache, NVML readings, and the
flags a table puts on a row: all without a GPU (the measurements are injected)."""

from __future__ import annotations

import json
import sys
import types
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from harness import record, stats
from harness.loading import load_problem
from harness.measure import benchmarking, gradients, hardware
from harness.record import BenchRow, Ceiling, CompiledRow, GpuState, Machine, Measurement
from harness.results import baselines, report
from harness.results.baselines import Baseline
from harness.stats import Interval, PerCall
from tests import records_factory as make
from tests.conftest import REPO

H200 = Machine(gpu="NVIDIA H200", torch="2.11.0", driver="580")
CPU = torch.device("cpu")


def test_bytes_count_every_tensor_once_at_its_view_size() -> None:
    base = torch.zeros(10, 10)
    view = base[::2]  # 5 x 10 of a 100-element storage: 50 elements are moved
    assert hardware.tensor_bytes([view, (torch.zeros(3, dtype=torch.int64), 2.0)]) == 200 + 24


def test_default_count_is_inputs_plus_outputs_and_a_problem_may_declare_its_own() -> None:
    toy = load_problem("toy", REPO / "tests" / "fixtures" / "toy" / "reference.py")
    x = torch.zeros(4, 8)
    output, work = hardware.work(toy, toy.model(), [x], CPU)
    assert (work.bytes, work.flops, work.bound.partial) == (128 + 128, None, None)
    assert torch.equal(output, x * 2 + 1)
    problem = load_problem("m", REPO / "problems" / "multilabel_margin" / "reference.py")
    target = torch.tensor([[3, 1, -1, 0], [2, 0, 1, 3]])  # 3 and 4 label slots are read
    _, work = hardware.work(problem, problem.model(), [torch.zeros(2, 4), target], CPU)
    assert work.bytes == 2 * 4 * 4 + (3 + 4) * 8 + 4


class Linear(torch.nn.Module):
    def __init__(self, k: int, n: int) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(k, n, bias=False)

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.layer(a))


def test_a_matmul_counts_2mnk_flops_and_its_weights_among_the_bytes() -> None:
    toy = load_problem("toy", REPO / "tests" / "fixtures" / "toy" / "reference.py")
    m, n, k = 64, 48, 32
    _, work = hardware.work(toy, Linear(k, n), [torch.randn(m, k)], CPU)
    assert work.flops == 2 * m * n * k
    assert work.bytes == 4 * (m * k + m * n + k * n)  # input, output, weight: each once
    assert work.bound.flop_class == "fp32" and work.bound.partial is None
    _, half = hardware.work(
        toy, Linear(k, n).to(torch.bfloat16), [torch.randn(m, k).bfloat16()], CPU
    )
    assert half.bound.flop_class == "bf16" and half.bytes == work.bytes // 2


def test_a_backward_pass_counts_its_own_flops_and_moves_gradients() -> None:
    toy = load_problem("toy", REPO / "tests" / "fixtures" / "toy" / "reference.py")
    m, n, k = 64, 48, 32
    model, x = Linear(k, n), torch.randn(m, k)
    forward = hardware.work(toy, model, [x], CPU)
    step = gradients.Pass(gradients.BACKWARD, forward[0], ["layer.weight"])
    works = benchmarking._pass_works(toy, model, step, (1, [x], forward), CPU)
    back, both = works[gradients.BACKWARD], works[gradients.BOTH]
    assert back.flops == 4 * m * n * k  # the input's gradient and the weight's: 2MNK each
    assert back.bytes == 4 * (m * n + m * k + n * k)  # the upstream gradient read, two written
    assert both.flops == 6 * m * n * k and both.bound.flop_class == "fp32"
    assert both.bytes == back.bytes + 4 * (m * k + n * k)  # the forward's input and weight, read


def test_an_elementwise_problem_has_no_flops_and_an_rnn_a_partial_bound() -> None:
    toy = load_problem("toy", REPO / "tests" / "fixtures" / "toy" / "reference.py")
    _, work = hardware.work(toy, toy.model(), [torch.randn(256, 256)], CPU)
    assert (work.flops, work.bound.partial) == (None, None)  # its bytes alone bound it
    for op, heavy in (("aten._cudnn_rnn", True), ("aten.cummax", False), ("mylib.fused", True)):
        assert hardware.opaque(op) is heavy
    assert hardware.peak_tflops("NVIDIA H200", "fp32") == 67
    assert hardware.peak_tflops("NVIDIA H100 PCIe", "bf16") == 756
    assert hardware.peak_tflops("Tesla T4", "fp32") is None


def test_a_declared_flop_count_wins() -> None:
    problem = load_problem("mm", REPO / "problems" / "matmul" / "reference.py")
    a, b = torch.randn(16, 8), torch.randn(8, 4)
    model = problem.model(*problem.benchmarks[0].get_init_inputs())
    output, work = hardware.work(problem, model, [a, b], CPU)
    assert work.flops == problem.count_flops([a, b], output)


def test_ceiling_is_measured_once_per_gpu_and_torch(tmp_path: Path, monkeypatch) -> None:
    calls = []

    def fake_copy(device: torch.device) -> Ceiling:
        calls.append(device)
        return Ceiling(copy_gbps=4000.0 + len(calls), copy_bytes=1)

    monkeypatch.setattr(hardware, "measure_copy", fake_copy)
    cuda = torch.device("cuda")
    first = hardware.ceiling(tmp_path, cuda, H200)
    again = hardware.ceiling(tmp_path, cuda, H200)
    assert first is not None and again is not None
    assert (first.cached, again.cached, again.copy_gbps) == (False, True, 4001.0)
    other = hardware.ceiling(tmp_path, cuda, replace(H200, torch="2.12.0"))
    assert other is not None and other.copy_gbps == 4002.0 and len(calls) == 2
    written = json.loads((tmp_path / "ceiling.json").read_text())
    assert written["torch"] == "2.12.0" and "cached" not in written
    assert hardware.ceiling(tmp_path, torch.device("cpu"), H200) is None


KEY = baselines.BaselineKey("p", "r", "cuda_events", "read", H200.gpu, H200.torch)


def baseline_entry(run_id: str, compiled_us: float, mismatch: str | None = None) -> Baseline:
    row = CompiledRow(
        name="default",
        inputs=("float32[512,1024]",),
        compiled=make.timing(compiled_us, seed=5),
        compile_s=3.0,
        mismatch=mismatch,
        mode="cuda_events",
    )
    return Baseline(KEY, baselines.MeasuredBy(run_id, "2026-11-29T10:00:00+00:00"), row)


def test_compile_baseline_gives_an_unpaired_speedup_and_says_when_cached() -> None:
    row = make.bench(solution_us=10.0, reference_us=40.0)
    assert row.mode == "cuda_events"
    baseline, versus = baselines.versus(row, [baseline_entry("old-run", 20.0)], run_id="this-run")
    assert baseline is not None and baseline.cached is True and baseline.compile_s == 3.0
    assert versus is not None and versus.low < versus.value < versus.high
    assert versus.value == pytest.approx(2.0, rel=0.02)
    fresh, _ = baselines.versus(row, [baseline_entry("this-run", 20.0)], run_id="this-run")
    assert fresh is not None and fresh.cached is False
    other_timer = replace(row, mode="cuda_graph")
    assert baselines.versus(other_timer, [baseline_entry("r", 20.0)], "r") == (None, None)


def test_a_wrong_compiled_reference_gives_no_speedup() -> None:
    measured = make.bench(solution_us=10.0, reference_us=40.0)
    entry = baseline_entry("r", 20.0, mismatch="1 of 1 differ")
    baseline, versus = baselines.versus(measured, [entry], "r")
    assert versus is None and baseline is not None and baseline.mismatch
    bench = replace(measured, compile=baseline, vs_compile=versus)
    assert baselines.bench_vs_compile(bench) is None
    row = report.table_rows([make.record("p", "s", [bench])])[0]
    assert "wrong answer" in report.markdown_table([row])


def test_baselines_are_looked_up_by_gpu_torch_mode_and_flush(tmp_path: Path) -> None:
    entry = baseline_entry("r", 20.0)
    baselines.store(tmp_path, [entry])
    assert baselines.cached(tmp_path, KEY) == [entry]  # read back whole
    assert baselines.cached(tmp_path, replace(KEY, torch="2.12.0")) == []
    assert baselines.cached(tmp_path, replace(KEY, flush="write")) == []
    assert baselines.cached(tmp_path, replace(KEY, mode="cuda_graph")) == []
    assert record.read(tmp_path) == []  # a log of its own, not runs.jsonl


def test_a_baselines_line_is_one_flat_object_and_older_lines_still_read(tmp_path: Path) -> None:
    line = baselines.flat(baseline_entry("r", 20.0))
    assert {"problem", "gpu", "run_id", "name", "compiled", "mismatch"} <= set(line)
    older = {k: v for k, v in line.items() if k not in ("flush", "reference", "state")}
    (tmp_path / baselines.LOG_NAME).write_text(f"{json.dumps(older)}\n{{}}\n")
    (read,) = baselines.read(tmp_path)  # the empty object is no baseline: skipped
    assert read.key == KEY and read.row == baseline_entry("r", 20.0).row


class FakeNvml:
    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, readings: list[tuple[int, int, int]]) -> None:
        self.readings = iter(readings)
        self.current = (0, 0, 0)

    def nvmlDeviceGetClockInfo(self, handle: object, kind: int) -> int:
        self.current = next(self.readings)
        return self.current[0]

    def nvmlDeviceGetTemperature(self, handle: object, kind: int) -> int:
        return self.current[1]

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: object) -> int:
        return self.current[2]


def test_samples_read_while_throttled_are_counted() -> None:
    nvml = FakeNvml([(1980, 40, 0x1), (1755, 52, 0x4 | 0x20), (1980, 45, 0)])
    probe = hardware.Probe(nvml, handle=None)
    for samples in (10, 20, 40):
        probe.after(samples)
    assert probe.summary() == GpuState(
        sm_mhz=(1755, 1980),
        temp_c=(40, 52),
        throttled_samples=20,  # idle (0x1) and sync boost (0x20) are not throttling
        samples=70,
        reasons=("power cap",),
    )


def test_no_nvml_means_no_state_and_no_error(monkeypatch, capsys) -> None:
    broken = types.ModuleType("pynvml")

    def fail() -> None:
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    broken.nvmlInit = fail  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", broken)
    assert hardware.open_probe(torch.device("cuda")) is None
    assert "machine state not recorded" in capsys.readouterr().out


def test_flags_warn_above_the_ceiling_when_launch_bound_noisy_or_throttled() -> None:
    noisy = Measurement((1.0, 3.0) * 10 + (2.0,), "cuda_events")  # median 2 us, RSE 11%
    bench = replace(
        make.bench(solution_us=2.0, reference_us=8.0),
        solution=noisy,
        bytes=10_000_000,
        floor_us=3.5,
        launch_bound=True,
        state=GpuState((1700, 1980), (60, 70), throttled_samples=12, reasons=("power cap",)),
    )
    run = replace(make.record("p", "s", [bench]), ceiling=Ceiling(copy_gbps=4000.0))
    row = report.table_rows([run])[0]
    assert row.gbps == pytest.approx(5000.0)  # 10 MB in 2 us
    flags = row.flags
    assert "ABOVE the copy ceiling" in flags and "launch-bound" in flags
    assert "noisy solution" in flags and "throttled: 12 samples (power cap)" in flags
    quiet = make.bench(solution_us=20.0, reference_us=80.0)
    assert report.table_rows([make.record("p", "q", [quiet])])[0].flags == ""


def test_a_row_is_built_from_its_sampling_and_what_its_fed_calls_gave() -> None:
    reference, solution = make.timing(40.0, seed=1), make.timing(10.0, seed=2)
    speedup, per_call_speedup = Interval(4.0, 3.9, 4.1), Interval(3.5, 3.4, 3.6)
    sides = {"reference": reference, "solution": solution}
    sampled = benchmarking.SideBySide("cuda_events", "target", "fed", sides, speedup, None)
    per_call = PerCall(reference, solution, per_call_speedup)
    fed = benchmarking.Fed(5, 11.0, per_call, "reference")
    inputs = [torch.zeros(2, 3), 0.5]
    row = benchmarking._row("default", inputs, (sampled, fed), 4.0, "a note")
    assert row == BenchRow(
        name="default",
        inputs=("float32[2,3]", "0.5"),
        reference=reference,
        solution=solution,
        speedup=speedup,
        mode="cuda_events",
        stop="target",
        note="a note",
        floor_us=4.0,
        launch_bound=True,  # a 10 us median under 3 floors of 4 us
        spot_checks=5,
        wall_us=11.0,
        per_call=per_call,
        host_bound="reference",
    )
    graphed = benchmarking._row("default", inputs, (sampled, None), None, None)
    assert (graphed.spot_checks, graphed.per_call, graphed.launch_bound) == (None, None, False)


def test_a_row_has_its_speed_of_light_share_and_scores_and_flags_a_time_below_it() -> None:
    # 4 GB at 4,000 GB/s: 1,000 us; 2e12 fp32 FLOPs at 67 TFLOP/s: 29,851 us, the larger
    compute_bound = replace(
        make.bench(solution_us=59_702.0, reference_us=89_552.0),
        bytes=4_000_000_000,
        flops=2_000_000_000_000,
        bound=record.Bound("fp32", 67.0, None),
    )
    run = replace(make.record("p", "s", [compute_bound]), ceiling=Ceiling(copy_gbps=4000.0))
    row = report.table_rows([run])[0]
    assert row.sol_us == pytest.approx(2e12 / 67e6)
    assert row.sol_pct == pytest.approx(50.0, rel=0.01)  # twice the bound's time
    assert row.sol_score == pytest.approx(2 / 3, rel=0.01)  # eager at 3x the bound: 1/(1+1/2)
    assert row.sol_partial is None and "speed of light" not in (row.flags or "")
    memory_only = replace(compute_bound, flops=None, bound=None)  # an older record
    too_fast = replace(memory_only, solution=make.timing(500.0, seed=3))
    row = report.table_rows([replace(run, benchmarks=(too_fast,))])[0]
    assert row.sol_us == pytest.approx(1000.0) and row.sol_pct == pytest.approx(200.0, rel=0.02)
    assert "BELOW the speed of light" in row.flags and "SOL bound partial" in row.flags
    assert "no SOL score" not in row.flags  # eager, at 89,552 us, is far slower than 1,000
    assert report.table_rows([make.record("p", "q", [make.bench(2.0, 4.0)])])[0].sol_us is None
    # eager at the bytes' bound (990 us against 1,000): a share, no score, and the row says why
    at_bound = replace(memory_only, bound=record.Bound(), reference=make.timing(990.0, seed=4))
    row = report.table_rows([replace(run, benchmarks=(at_bound,))])[0]
    assert row.sol_pct == pytest.approx(100 * 1000 / 59_702, rel=0.02) and row.sol_score is None
    assert "no SOL score: eager PyTorch (9" in row.flags and "light (1,000 us)" in row.flags


def test_the_sol_score_is_one_at_the_bound_a_half_at_the_baseline_and_falls_beyond() -> None:
    assert stats.sol_score(10.0, 30.0, 10.0) == 1.0
    assert stats.sol_score(30.0, 30.0, 10.0) == 0.5
    assert stats.sol_score(210.0, 30.0, 10.0) == pytest.approx(1 / 11)
    assert stats.sol_score(20.0, 8.0, 10.0) is None  # a baseline faster than the bound


def test_each_torch_compile_is_framed_as_a_build_so_the_build_limit_covers_it(
    monkeypatch,
) -> None:
    # Inductor compiling C++ on a cold CPU takes minutes: the first call of the compiled
    # reference lies between a BuildStart and a BuildEnd, which the parent times against
    # --build-timeout (harness.run.isolate._watch), not the time step's --timeout.
    from harness.job import BuildEnd, BuildStart
    from harness.measure import compiled
    from harness.settings import Settings, StopRule, Timing

    seen: list[object] = []

    def traced(model: torch.nn.Module) -> object:
        def call(*args: object) -> object:
            seen.append("compiled call")
            return model(*args)

        return call

    monkeypatch.setattr(torch, "compile", traced)
    toy = load_problem("toy", REPO / "tests" / "fixtures" / "toy" / "reference.py")
    quick = Settings(
        device="cpu", timing=Timing(rule=StopRule(warmup_ms=0, min_samples=2, max_samples=2))
    )
    rows, untimed = compiled.compile_baseline(toy, CPU, quick, seen.append)
    assert rows and len(rows) == len(toy.benchmarks) and not untimed
    first = seen.index("compiled call")
    assert seen[first - 1] == BuildStart(compiled.COMPILE_BUILD)
    ended = [e for e in seen[first:] if isinstance(e, BuildEnd)]
    assert ended and ended[0].name == compiled.COMPILE_BUILD
    assert seen.index(ended[0]) < len(seen) and sum(isinstance(e, BuildStart) for e in seen) == len(
        toy.benchmarks
    )


def test_a_compile_baseline_shape_that_cannot_finish_in_the_time_step_is_left_out_with_why(
    monkeypatch,
) -> None:
    # On a CPU, Inductor's multilabel_margin_loss at 4096x8192 takes minutes a call (at
    # 512x1024, about a second): the baseline times one round of each shape, leaves out a shape
    # whose warm-up and --min-samples rounds cannot end within --timeout, with why, and times
    # the others, instead of the whole baseline being killed at the limit.
    import time

    from harness.loading import Case
    from harness.measure import compiled
    from harness.settings import Limits, Settings, StopRule, Timing

    calls: list[int] = []

    def slow_when_large(model: torch.nn.Module) -> object:
        def call(x: torch.Tensor) -> object:
            calls.append(x.numel())
            time.sleep(0.2 if x.numel() > 10_000 else 0.0)
            return model(x)

        return call

    monkeypatch.setattr(torch, "compile", slow_when_large)
    toy = load_problem("toy", REPO / "tests" / "fixtures" / "toy" / "reference.py")
    small = Case("8x8", toy.benchmarks[0].get_init_inputs, lambda: [torch.randn(8, 8)])
    two = replace(toy, benchmarks=(*toy.benchmarks, small))
    rule = StopRule(warmup_ms=0, min_samples=10, max_samples=10)
    tight = Settings(device="cpu", timing=Timing(rule=rule), limits=Limits(run_s=1.0))
    rows, untimed = compiled.compile_baseline(two, CPU, tight)
    assert [row.name for row in rows] == ["default", "8x8"] and list(untimed) == ["256x256"]
    why = untimed["256x256"]
    assert "10 samples need" in why and "past --timeout 1 s" in why and "\n" not in why
    assert calls.count(256 * 256) == 2  # the compiling call and the one timed call: no sampling
    roomy = replace(tight, limits=Limits(run_s=60.0))
    rule_small = StopRule(warmup_ms=0, min_samples=2, max_samples=2)
    rows, untimed = compiled.compile_baseline(
        two, CPU, replace(roomy, timing=Timing(rule=rule_small))
    )
    assert len(rows) == len(two.benchmarks) and not untimed
