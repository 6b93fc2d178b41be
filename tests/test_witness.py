"""run.py --ncu: Nsight Compute counts the bytes one call moves (harness.run.ncu), the row
records them, and a row that moves less than the problem's minimum is flagged. ncu itself runs
on a GPU only (tests/test_gpu.py); here a stand-in plays its part."""

from __future__ import annotations

import json
import stat
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import run
from harness import codec
from harness.job import Job
from harness.record import BenchRow, Witness
from harness.results import report
from harness.run import ncu
from harness.settings import Limits, Settings
from tests import records_factory as make
from tests.conftest import TOY, CliRun, toy_solution

# The form of ncu 2025.3's CSV on the H200 (two kernels; a header line before the table).
REPORT = """==PROF== Connected to process 571 (/usr/bin/python3.12)
"ID","Process ID","Kernel Name","Metric Name","Metric Unit","Metric Value"
"0","571","fill","dram__bytes_read.sum","byte","6,144"
"0","571","fill","dram__bytes_write.sum","byte","39,648,512"
"0","571","fill","lts__t_sectors_op_write.sum","sector","2,097,152"
"1","571","mul","dram__bytes_read.sum","byte","67,117,824"
"1","571","mul","dram__bytes_write.sum","byte","40,394,496"
"1","571","mul","lts__t_sectors_op_write.sum","sector","2,097,152"
"""


def test_the_report_sums_every_kernel_and_counts_writes_where_they_reach_l2() -> None:
    witness = ncu.parse(REPORT)
    assert witness == Witness(
        kernels=2,
        dram_read=6_144 + 67_117_824,
        dram_write=39_648_512 + 40_394_496,
        l2_write=2 * 2_097_152 * 32,
    )
    # The writes that stayed in L2 when the kernels ended still count.
    assert witness.moved == witness.dram_read + witness.l2_write


def test_a_report_without_a_table_profiled_no_kernel() -> None:
    assert ncu.parse("==WARNING== No kernels were profiled.\n") == Witness(0, 0, 0, 0)


def test_a_value_that_is_not_a_number_is_an_error_not_a_zero() -> None:
    with pytest.raises(ValueError, match=r"'n/a' for dram__bytes_read\.sum"):
        ncu.parse(REPORT.replace('"6,144"', '"n/a"'))


def witnessed_row(moved: int, minimum: int) -> BenchRow:
    row = replace(make.bench(10.0, 20.0), bytes=minimum)
    return replace(row, witness=Witness(kernels=1, dram_read=moved, dram_write=0, l2_write=0))


@pytest.mark.parametrize(("moved", "flagged"), [(24_000_000, True), (100_000_000, False)])
def test_a_row_that_moves_less_than_the_minimum_is_flagged(moved: int, flagged: bool) -> None:
    (row,) = report.table_rows([make.record("p", "s", [witnessed_row(moved, 100_000_000)])])
    assert row.ncu_bytes == moved
    assert row.ncu_pct == pytest.approx(moved / 1e6)
    assert ("MOVED 24% of the problem's minimum bytes under ncu" in (row.flags or "")) is flagged


def test_a_row_without_a_witness_has_no_ncu_columns_and_no_flag() -> None:
    bench = replace(make.bench(10.0, 20.0), bytes=1000)
    (row,) = report.table_rows([make.record("p", "s", [bench])])
    assert row.ncu_bytes is None and "ncu" not in (row.flags or "")


def test_the_witness_round_trips_through_a_record() -> None:
    row = witnessed_row(5, 10)
    data = json.loads(json.dumps(codec.encode(row)))
    assert data["witness"] == {"kernels": 1, "dram_read": 5, "dram_write": 0, "l2_write": 0}
    assert codec.decode(BenchRow, data) == row
    assert "witness" not in codec.encode(make.bench(1.0, 2.0))


SPEC = Job("toy", "r.py", "s.py", "", "abc", Settings(ncu=True))


def fake_ncu(tmp_path: Path, body: str) -> Path:
    """An executable standing in for ncu: `body` is Python, with the arguments in `args`."""
    path = tmp_path / "ncu"
    path.write_text(f"#!{sys.executable}\nimport sys, time\nargs = sys.argv[1:]\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


# A run's limit that no fake ncu reaches: on a loaded 2-core CI machine a Python start alone
# took seconds.
AMPLE_RUN_S = 60.0


def witness_with(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    body: str,
    device: str = "cuda:0",
    run_s: float = AMPLE_RUN_S,
) -> tuple[list[BenchRow], list[str]]:
    """`ncu.witness_rows` on two rows with a fake ncu running `body`; `run_s` is the run's limit."""
    monkeypatch.setattr(ncu, "find_ncu", lambda: str(fake_ncu(tmp_path, body)))
    settings = Settings(device="cuda:0", ncu=True, limits=Limits(run_s=run_s))
    rows = [make.bench(10.0, 20.0, name="small"), make.bench(10.0, 20.0, name="large")]
    notes: list[str] = []
    log = tmp_path / "logs" / "01-toy--s.log"
    result = ncu.witness_rows(settings, device, SPEC, rows, log, notes.append)
    assert notes == [] if device == "cpu" else len(notes) == 2
    return result


WRITES_REPORT = f"""
log = args[args.index("--log-file") + 1]
open(log, "w").write({REPORT!r})
"""


def test_each_benchmark_is_counted_by_ncu_in_a_process_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = WRITES_REPORT + "print('ran', ' '.join(args[-4:]))"
    rows, warnings = witness_with(tmp_path, monkeypatch, body)
    assert warnings == []
    assert [row.witness for row in rows] == [ncu.parse(REPORT)] * 2
    log = (tmp_path / "logs" / "01-toy--s.log").read_text()
    assert "-m harness.measure.witness" in log and log.count("--- ncu witness") == 2
    spec = tmp_path / "logs" / "01-toy--s.ncu.json"
    assert log.splitlines()[-1] == f"ran -m harness.measure.witness {spec} 1"
    written = json.loads(spec.read_text())
    assert written["solution"] == "s.py" and written["settings"]["ncu"] is True


def test_the_command_counts_one_marked_call_in_base_units() -> None:
    line = ncu.command("ncu", Path("spec.json"), 3, Path("out.csv"))
    assert line[:7] == [
        "ncu",
        "--csv",
        "--print-units",
        "base",
        "--profile-from-start",
        "off",
        "--metrics",
    ]
    assert set(line[7].split(",")) == set(ncu.METRICS)
    assert line[-3:] == ["harness.measure.witness", "spec.json", "3"]


def test_ncu_failing_is_a_warning_with_its_error_and_the_row_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = """
log = args[args.index("--log-file") + 1]
open(log, "w").write("==ERROR== ERR_NVGPUCTRPERM - no permission to the GPU's counters\\n")
sys.exit(1)
"""
    rows, warnings = witness_with(tmp_path, monkeypatch, body)
    assert all(row.witness is None for row in rows)
    assert warnings[0] == (
        "ncu witness skipped on small: ncu exited with status 1 "
        "(==ERROR== ERR_NVGPUCTRPERM - no permission to the GPU's counters)"
    )


def test_ncu_running_past_the_limit_is_stopped_and_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows, warnings = witness_with(tmp_path, monkeypatch, "time.sleep(60)", run_s=5.0)
    assert all(row.witness is None for row in rows)
    assert warnings[0] == "ncu witness skipped on small: ncu ran past the 5 s limit (--timeout)"


def test_without_ncu_or_a_gpu_the_witness_is_skipped_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows, warnings = witness_with(tmp_path, monkeypatch, "sys.exit(9)", device="cpu")
    assert warnings == ["ncu witness skipped: the solution ran on the CPU"]
    monkeypatch.setattr(ncu, "find_ncu", lambda: None)
    settings = Settings(device="cuda:0", ncu=True)
    _, warnings = ncu.witness_rows(settings, "cuda:0", SPEC, rows, tmp_path / "x.log", print)
    assert warnings == ["ncu witness skipped: no ncu (Nsight Compute) on PATH or in CUDA_HOME/bin"]


def test_a_cpu_run_with_ncu_records_why_there_is_no_witness(cli: CliRun) -> None:
    args = ["--problem", str(TOY), "--solution", toy_solution("good"), "--device", "cpu"]
    assert cli(*args, "--ncu", "--max-samples", "10", "--trials", "1") == run.EXIT_OK
    record = cli.record("good")
    assert record["settings"]["ncu"] is True
    assert "ncu witness skipped: the solution ran on the CPU" in record["warnings"]
    assert all("witness" not in bench for bench in record["benchmarks"])


def test_a_backward_pass_row_gets_no_witness_and_the_forward_rows_keep_their_places(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ncu, "find_ncu", lambda: str(fake_ncu(tmp_path, WRITES_REPORT)))
    settings = Settings(device="cuda:0", ncu=True, limits=Limits(run_s=AMPLE_RUN_S))
    small, large = make.bench(10.0, 20.0, name="small"), make.bench(10.0, 20.0, name="large")
    passes = [replace(small, name=f"small {kind}", backward=kind) for kind in ("backward", "b+f")]
    log = tmp_path / "logs" / "01-toy--s.log"
    rows, warnings = ncu.witness_rows(settings, "cuda:0", SPEC, [small, *passes, large], log, print)
    assert warnings == []
    assert [row.witness is not None for row in rows] == [True, False, False, True]
    assert sorted(p.name for p in log.parent.glob("*.ncu*.csv")) == [
        "01-toy--s.ncu0.csv",
        "01-toy--s.ncu1.csv",
    ]
