"""The verdict rests on evidence the solution's process cannot write (harness.run.refereeing).

The doors of tests/fixtures/cheats_referee/, each a few lines of Python in the solution's file,
run through run.py on the CPU against tests/fixtures/toy_abs (y = |x| * scale + 1), whose
reference calls torch.abs by name; then the pieces: the referee's comparison of evidence, the
parent's rule on a bare batch, and the directed rounds' pairing.
"""

from __future__ import annotations

import os
import pickle
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from harness import verdicts
from harness.loading import Seeds, load_problem, make_inputs
from harness.measure import directed, referee
from harness.run import refereeing, rounds
from harness.settings import Checking, Settings
from harness.stats import Measurement
from tests.conftest import FIXTURES, CliRun

DOORS = FIXTURES / "cheats_referee"
TOY_ABS = FIXTURES / "toy_abs"

# fixture: (status, the rule broken (rejections only), a phrase of the detail)
EXPECTED = {
    "wraps_connection_send": (
        "rejected",
        "report_unconfirmed",
        "reports other times than it gave while the harness timed it",
    ),
    "forges_result_via_gc": (
        "rejected",
        "report_unconfirmed",
        "sent a final report (ok) in place of the timed calls it was asked for",
    ),
    "writes_result_fd": (
        "rejected",
        "report_unconfirmed",
        "sent a final report (ok) in place of the timed calls it was asked for",
    ),
    "replaces_torch_function": ("rejected", "torch_replaced", "torch.abs was replaced"),
    "replaces_tensor_method": ("rejected", "torch_replaced", "torch.Tensor.__mul__ was replaced"),
    "returns_expected_via_gc": ("incorrect", None, "timed call"),
    "patches_timer_run": ("rejected", "time_unconfirmed", "its report is not its own"),
}
# Judged at their honest speed: nothing they change reaches the reference's process.
HONEST_SPEED = ("honest", "hides_a_replaced_function")


def test_every_door_has_an_expected_verdict() -> None:
    assert {path.stem for path in DOORS.glob("*.py")} == {*EXPECTED, *HONEST_SPEED}


@pytest.fixture(scope="module")
def doors_run(module_cli: CliRun) -> CliRun:
    names = [*EXPECTED, *HONEST_SPEED]
    args = [a for name in names for a in ("--solution", str(DOORS / f"{name}.py"))]
    module_cli(
        "--problem", str(TOY_ABS), *args, "--device", "cpu", "--max-samples", "20",
        "--trials", "2",
    )  # fmt: skip
    return module_cli


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_door_is_closed_by_its_rule(doors_run: CliRun, name: str) -> None:
    record = doors_run.record(name)
    status, reason, phrase = EXPECTED[name]
    assert (record["status"], record.get("reason")) == (status, reason), record["detail"]
    assert phrase in record["detail"]
    assert record["benchmarks"] == []


@pytest.mark.parametrize("name", HONEST_SPEED)
def test_what_reaches_no_reference_is_judged_as_it_is(doors_run: CliRun, name: str) -> None:
    """`ok`, each row timed under the parent's direction: its bare batch was clocked outside
    the worker, and the eager side's samples are the referee's."""
    record = doors_run.record(name)
    assert record["status"] == "ok", record["detail"]
    assert len(record["benchmarks"]) == 2
    for row in record["benchmarks"]:
        assert row["outside_ratio"] is not None
        busy = min(row.get("others_cpu_share") or 0.0, rounds.OTHERS_MAX)  # other tests' load
        bound = (rounds.LIE_FACTORS["cpu"] + 1) / (1 - busy)  # bare calls, a cold cache
        assert row["outside_ratio"] <= bound, row["others_cpu_share"]
        assert len(row["reference"]["times_us"]) == len(row["solution"]["times_us"])


def test_the_referee_keeps_a_log_of_what_the_parent_clocked(doors_run: CliRun) -> None:
    logs = list((doors_run.root / "logs").rglob("*honest.referee.log"))
    assert logs, "no referee log"
    lines = [line for line in logs[0].read_text().splitlines() if line.startswith("parent: ")]
    assert any("1024x1024 forward wall_clock" in line and "bare (" in line for line in lines)


# The referee's comparison of what a worker left.


def toy_referee(trials: int = 2) -> referee.Referee:
    problem = load_problem("toy_abs", TOY_ABS / "reference.py")
    return referee.Referee(problem, Settings(checking=Checking(trials=trials, secret=7)))


def answer_of(judge: referee.Referee, key: str) -> torch.Tensor:
    """The reference's answer for evidence `key`, drawn as the worker draws it."""
    seeds = Seeds.of(judge.settings.checking)
    _, index, *trial = key.split("-")
    case = judge.problem.cases[int(index)]
    inputs = make_inputs(case, seeds.trial(int(index), int(trial[0])), torch.device("cpu"))
    return torch.abs(inputs[0]) * 2.0 + 1


def test_the_plan_names_every_valid_check_and_every_benchmark() -> None:
    plan = toy_referee(trials=3).plan()
    assert plan == (  # the default case, then '5x7'; each of the two benchmarks
        *(directed.case_key(case, trial) for case in (0, 1) for trial in (1, 2, 3)),
        directed.bench_key(0),
        directed.bench_key(1),
    )


def test_the_referee_compares_a_left_output_with_its_own_answer(tmp_path: Path) -> None:
    judge, key = toy_referee(), directed.case_key(0, 1)
    right = answer_of(judge, key)
    path = tmp_path / directed.evidence_name(key, "cpu")
    torch.save(right, path)
    assert judge.compare(referee.Compare(key, str(path), "cpu")) is None
    torch.save(right + 0.5, path)
    assert judge.compare(referee.Compare(key, str(path), "cpu"))


class Planted:
    """An object whose unpickling runs code: what a weights-only load refuses."""

    def __reduce__(self) -> tuple:
        return (print, ("the referee ran code from a solution's file",))


def test_the_referee_runs_no_code_from_a_left_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    judge, key = toy_referee(), directed.case_key(0, 1)
    path = tmp_path / directed.evidence_name(key, "cpu")
    path.write_bytes(pickle.dumps(Planted()))
    mismatch = judge.compare(referee.Compare(key, str(path), "cpu"))
    assert mismatch is not None and "could not be read back" in mismatch
    assert "ran code" not in capsys.readouterr().out


def test_the_referee_refuses_a_file_larger_than_the_answer(tmp_path: Path) -> None:
    judge, key = toy_referee(), directed.case_key(0, 1)
    path = tmp_path / directed.evidence_name(key, "cpu")
    torch.save(torch.zeros(1 << 19), path)  # 2 MiB, against an answer of 140 bytes
    mismatch = judge.compare(referee.Compare(key, str(path), "cpu"))
    assert mismatch is not None and "more than the answer's" in mismatch


def test_the_referee_compares_only_the_checks_of_its_plan(tmp_path: Path) -> None:
    judge = toy_referee()
    mismatch = judge.compare(referee.Compare("case-0-9", str(tmp_path / "x.pt"), "cpu"))
    assert mismatch == "case-0-9 is not a check of this run"


# The parent's clock and the rounds it directs.


def kept(
    median_us: float, bare: tuple[int, float], control: tuple[int, float] = (100, 10_000.0)
) -> rounds.Sampling:
    """A sampling whose solution reported `median_us` a call; the reference 100 us a call, its
    bare batch `control`."""
    spec = directed.Spec("b", "forward", "cuda_events", device="cuda:0")
    solution = Measurement((median_us,) * 10, "wall_clock")
    reference = Measurement((100.0,) * 10, "wall_clock")
    return rounds.Sampling(spec, reference, solution, bare=bare, control=control)


def test_a_bare_batch_that_bears_out_the_report_confirms_it() -> None:
    assert kept(100.0, (500, 50_000.0)).confirmed() is None
    assert kept(100.0, (500, 40_000.0)).confirmed() is None  # a warm cache is faster


def test_a_report_twenty_times_too_fast_is_not_confirmed() -> None:
    why = kept(5.0, (10_000, 1_000_000.0)).confirmed()
    assert why is not None and "(20.0x;" in why


def test_a_load_that_slows_the_references_batch_too_widens_the_bound() -> None:
    loaded = (100, 20_000.0)  # the reference's batch took twice its reported time
    assert kept(100.0, (500, 100_000.0), loaded).confirmed() is None
    assert kept(100.0, (500, 100_000.0)).confirmed() is not None
    assert kept(5.0, (10_000, 1_000_000.0), loaded).confirmed() is not None


def on_cpu(median_us: float, bare: tuple[int, float], control: tuple[int, float]) -> str | None:
    """`kept`'s verdict for a CPU row: the reference reported 100 us a call."""
    sampling = kept(median_us, bare, control)
    sampling.spec = replace(sampling.spec, device="cpu")
    return sampling.confirmed()


def test_on_a_cpu_the_bound_is_the_references_own_batch_over_its_report() -> None:
    quiet = (100, 5_000.0)  # bare calls run warmer than timed ones: half the reported time
    assert on_cpu(100.0, (500, 170_000.0), quiet) is None  # 3.4x its report: 3.5x is allowed
    assert on_cpu(100.0, (500, 180_000.0), quiet) is not None
    stretched = (100, 15_000.0)  # the reference's batch slowed by load: room up to 1x at most
    assert on_cpu(100.0, (500, 340_000.0), stretched) is None
    assert on_cpu(100.0, (500, 360_000.0), stretched) is not None
    assert on_cpu(100.0, (500, 60_000.0), (100, 0.0)) is not None  # a batch read as 0 s


def test_on_a_cpu_a_report_inflated_by_a_loaded_sampling_is_still_caught() -> None:
    # seen with two busy processes on 2 cores: the rounds took 30 times the calls' quiet
    # time on both sides, a report divided by twenty then looks like 1.3 times a bare call
    loaded = (10_000, 50_000.0)  # the reference's bare calls: 1/20 of its report
    assert on_cpu(100.0, (500, 66_000.0), loaded) is not None
    assert on_cpu(100.0, (500, 66_000.0), (10, 500.0)) is None  # where that was no load
    honest = (500, 2_500.0)  # the solution's bare calls as far below its report
    assert on_cpu(100.0, honest, loaded) is None


def scripted_judge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tries: list[float]
) -> tuple[refereeing.Judge, list]:
    """A Judge whose bare batches are scripted: each try's solution batch scores `tries[i]`
    (its time over its bound), the reference's taking half its own report; and the tries it
    made."""
    job = SimpleNamespace(settings=Settings(), log_path=str(tmp_path / "job.log"))
    judge = refereeing.Judge(job, os.getpid(), print, lambda t: None, tmp_path)
    judge.process = SimpleNamespace(pid=os.getpid())
    made: list = []

    def bare(sides: dict, kept: rounds.Sampling) -> tuple:
        made.append(tries[len(made)])
        control = (100, 5_000.0)
        bound = replace(kept, control=control).allowance() * 500 * 100.0 + rounds.BARE_SLACK_US
        return control, (500, bound * made[-1])

    monkeypatch.setattr(judge, "_bare", bare)
    monkeypatch.setattr(rounds, "BARE_PAUSE_S", 0.0)
    return judge, made


def cpu_sampling() -> rounds.Sampling:
    sampling = kept(100.0, (1, 100.0))
    return replace(sampling, spec=replace(sampling.spec, device="cpu"))


@pytest.mark.parametrize(
    ("tries", "borne_out", "made"),
    [
        ([0.4, 9.0, 9.0], True, 1),  # well within its bound: one try decides
        ([1.2, 0.3, 0.8], True, 3),  # over, then within twice: the middle try is within
        ([0.8, 1.2, 1.2], False, 3),  # one try within among three is not enough
    ],
)
def test_the_middle_of_three_bare_tries_decides_unless_the_first_is_clear(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tries: list, borne_out: bool, made: int
) -> None:
    judge, tried = scripted_judge(tmp_path, monkeypatch, tries)
    sampling = cpu_sampling()
    assert judge._borne_out({}, sampling) is borne_out
    assert len(tried) == made
    assert (sampling.confirmed() is None) is borne_out
    assert (tmp_path / "job.referee.log").read_text().count("parent: b forward") == made


def test_on_a_gpu_a_first_try_borne_out_decides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    judge, tried = scripted_judge(tmp_path, monkeypatch, [0.7, 9.0, 9.0])
    assert judge._borne_out({}, kept(100.0, (1, 100.0))) is True  # an honest GPU row's score
    assert len(tried) == 1


def test_the_slack_covers_the_messages_of_a_short_batch() -> None:
    claimed = 0.5  # a report of half a microsecond: the batch is capped, the slack absolute
    count = rounds.bare_count(claimed)
    assert count == rounds.BARE_MAX_CALLS
    assert kept(claimed, (count, count * claimed + rounds.BARE_SLACK_US)).confirmed() is None


class FakeSide(rounds.RemoteSide):
    """A side that answers each segment at once, its calls taking `each_us`."""

    def __init__(self, name: str, each_us: float, log: list) -> None:
        super().__init__(name, lambda m: None, lambda t: None)
        self.each_us, self.log = each_us, log

    def segment(self, count: int, cover_us: float | None, first: bool) -> tuple:
        self.log.append((self.name, count, cover_us))
        return directed.Timed((self.each_us,) * count, host_us=self.each_us / 2), count * 10.0


def test_the_directed_timer_pairs_rounds_in_chunks_and_covers_both_sides_alike() -> None:
    from harness.measure import timing

    log: list = []
    sides = {
        "reference": FakeSide("reference", 40.0, log),
        "solution": FakeSide("solution", 8.0, log),
    }
    timer = rounds.DirectedTimer("cuda_events", sides, gpu=True)
    calls = timing._rounds(sides, ["reference", "solution"], 0, 40)  # type: ignore[arg-type]
    times = timer.run(calls)
    assert times == [40.0 if call.name == "reference" else 8.0 for call in calls]
    # 40 rounds: a chunk of 32 (each side one segment of 32), then one of 8
    assert [(name, count) for name, count, _ in log] == [
        ("reference", 32), ("solution", 32), ("reference", 8), ("solution", 8),
    ]  # fmt: skip
    covers = [cover for _, _, cover in log[2:]]
    assert covers[0] == covers[1]  # the same sleep for both sides, the slower host's
    assert covers[0] == timing.CudaTimer.cover_us(20.0)


def test_a_worker_failure_reported_while_timed_stands_as_its_own() -> None:
    from harness.job import Done, Judged

    failed = Judged(verdicts.INCORRECT, "benchmark 'b', timed call 3: wrong")
    side = rounds.RemoteSide("worker", lambda m: None, lambda t: Done(failed))
    with pytest.raises(rounds.Broken) as broken:
        side.segment(4, None, True)
    assert broken.value.own and broken.value.judged == failed


def test_an_ok_reported_in_place_of_an_answer_is_rejected() -> None:
    from harness.job import Done, Judged

    side = rounds.RemoteSide("worker", lambda m: None, lambda t: Done(Judged(verdicts.OK)))
    with pytest.raises(rounds.Broken) as broken:
        side.segment(4, None, True)
    assert broken.value.judged.reason == "report_unconfirmed"


# On a GPU: the same doors with the work done by a CUDA kernel of their own, on a problem whose
# kernels outlast their launches.

CUDA_ANSWER = '''from torch.utils.cpp_extension import load_inline

_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void abs_scale_add_kernel(const float* x, float* y, float scale, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = fabsf(x[i]) * scale + 1.0f;
}

torch::Tensor abs_scale_add(torch::Tensor x, double scale) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat, "float32 on a GPU only");
  auto input = x.contiguous();
  auto out = torch::empty_like(input);
  int64_t n = input.numel();
  if (n > 0) {
    auto stream = at::cuda::getCurrentCUDAStream();
    abs_scale_add_kernel<<<(n + 255) / 256, 256, 0, stream>>>(
        input.data_ptr<float>(), out.data_ptr<float>(), (float)scale, n);
  }
  return out;
}
"""
_EXTENSION = load_inline(
    "toy_abs_cuda",
    cpp_sources="torch::Tensor abs_scale_add(torch::Tensor x, double scale);",
    cuda_sources=_SOURCE,
    functions=["abs_scale_add"],
)


def answer(x, scale):
    return _EXTENSION.abs_scale_add(x, float(scale))
'''
TOY_ABS_LARGE = FIXTURES / "toy_abs_large"


def cuda_variant(door: Path, folder: Path) -> Path:
    """`door` with its `answer` computed by a CUDA kernel of its own (CUDA_ANSWER)."""
    text = door.read_text(encoding="utf-8")
    start = text.index("def answer(x, scale):")
    end = text.index("\n\n\n", start)
    made = folder / door.name
    made.write_text(text[:start] + CUDA_ANSWER + text[end + 1 :], encoding="utf-8")
    return made


@pytest.mark.gpu
def test_each_door_gets_the_same_verdict_on_a_gpu(tmp_path: Path, cli: CliRun) -> None:
    folder = tmp_path / "doors"
    folder.mkdir()
    names = [*EXPECTED, *HONEST_SPEED]
    made = [cuda_variant(DOORS / f"{name}.py", folder) for name in names]
    args = [a for path in made for a in ("--solution", str(path))]
    cli("--problem", str(TOY_ABS_LARGE), *args, "--trials", "2", "--build-jobs", "8")
    for name in EXPECTED:
        record = cli.record(name)
        status, reason, phrase = EXPECTED[name]
        assert (record["status"], record.get("reason")) == (status, reason), record["detail"]
        assert phrase in record["detail"]
    for name in HONEST_SPEED:
        record = cli.record(name)
        assert record["status"] == "ok", record["detail"]
        assert all(row["outside_ratio"] is not None for row in record["benchmarks"])
