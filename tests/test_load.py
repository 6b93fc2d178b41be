"""The machine's load: read as each solution's run begins, kept in the record only where read,
and flagged on the rows it may have slowed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import types
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import torch

from harness import codec
from harness import record as run_log
from harness.measure import hardware
from harness.record import Machine
from harness.results import load, report
from harness.run import machine
from tests.records_factory import bench, record

BUSY = {"load_1m": 24.3, "cpu_count": 16}
QUIET = {"load_1m": 12.0, "cpu_count": 16}


def test_the_load_reads_back_and_is_left_out_where_not_read() -> None:
    recorded = Machine(gpu="NVIDIA H200", load_1m=24.3, cpu_count=16, gpu_processes=0)
    data = codec.encode(recorded)
    assert (data["load_1m"], data["cpu_count"], data["gpu_processes"]) == (24.3, 16, 0)
    assert codec.decode(Machine, data) == recorded
    assert (
        not {"load_1m", "cpu_count", "gpu_processes"}
        & codec.encode(Machine(gpu="NVIDIA H200")).keys()
    )
    assert "gpu_processes" not in codec.encode(Machine(load_1m=1.0, cpu_count=2))


def flags_of(*runs) -> dict[str, str]:
    return {row.solution: row.flags for row in report.table_rows(list(runs))}


def test_a_cpu_row_timed_with_more_load_than_cpus_is_flagged_with_the_numbers() -> None:
    flagged = flags_of(
        record("p", "cpp_busy", [bench(100.0, 200.0)], device="cpu", busy=BUSY),
        record("p", "cpp_quiet", [bench(100.0, 200.0)], device="cpu", busy=QUIET),
        record("p", "cpp_old", [bench(100.0, 200.0)], device="cpu"),
        record("p", "cuda_busy_cpu", [bench(100.0, 200.0)], busy=BUSY),
    )
    assert "timed under load: load average 24.3 on 16 CPUs" in flagged["cpp_busy"]
    assert "under load" not in flagged["cpp_quiet"] + flagged["cpp_old"]
    assert "under load" not in flagged["cuda_busy_cpu"]  # its time is the GPU's


def test_a_cpu_row_others_took_processors_from_is_flagged_in_table_and_console() -> None:
    from harness.run.session import summary

    shared = replace(bench(100.0, 200.0), others_cpu_share=0.42)
    alone = replace(bench(100.0, 200.0), others_cpu_share=0.01)
    busy = record("p", "cpp_shared", [shared], device="cpu", busy=QUIET)
    flagged = flags_of(busy, record("p", "cpp_alone", [alone], device="cpu", busy=QUIET))
    said = "timed under load: other processes took 42% of the CPUs meanwhile"
    assert said in flagged["cpp_shared"] and "under load" not in flagged["cpp_alone"]
    assert said in summary(busy)  # the progress line says it too, not only the tables


def test_the_processors_other_processes_take_are_told_from_the_runs_own() -> None:
    from harness.run.rounds import OthersShare

    spin = "import time\nend = time.time() + 5.0\nwhile time.time() < end: pass"
    # One spinner below this process (the run's own, though no pid names it), one of another
    # tree: started by a process that exits at once, so that it is nobody's below this one.
    quiet = "stdout=s.DEVNULL, stderr=s.DEVNULL"  # else the run below waits for its end
    command = f"[sys.executable, '-c', {spin!r}]"
    detach = f"import subprocess as s, sys; print(s.Popen({command}, {quiet}).pid)"
    mine = subprocess.Popen([sys.executable, "-c", spin])
    started = subprocess.run([sys.executable, "-c", detach], capture_output=True, text=True)
    stranger = int(started.stdout)
    try:
        time.sleep(0.1)
        measured = OthersShare([])
        time.sleep(0.5)
        own, other, share = measured.own_ns(), measured.others_ns(), measured.share()
    finally:
        mine.kill()
        with contextlib.suppress(ProcessLookupError):
            os.kill(stranger, signal.SIGKILL)
    assert mine.pid in own and stranger not in own
    assert other is not None and share is not None and 0 <= share <= 1
    assert other > 0.25e9  # the stranger's half second counts as another's load


def test_a_gpu_row_timed_beside_other_processes_is_flagged() -> None:
    beside = {**QUIET, "gpu_processes": 2}
    flagged = flags_of(
        record("p", "crowded", [bench(100.0, 200.0)], busy=beside),
        record("p", "alone", [bench(100.0, 200.0)], busy={**QUIET, "gpu_processes": 0}),
    )
    assert "timed beside 2 other process(es) on the GPU" in flagged["crowded"]
    assert "beside" not in flagged["alone"]


def test_the_csv_holds_the_load(tmp_path: Path) -> None:
    run_log.append(tmp_path, record("p", "cpp", [bench(100.0, 200.0)], device="cpu", busy=BUSY))
    report.write_tables(tmp_path, "p", run_log.read(tmp_path))
    (row,) = pd.read_csv(tmp_path / "p.csv").to_dict("records")
    assert (row["load_1m"], row["cpu_count"]) == (24.3, 16) and pd.isna(row["gpu_processes"])
    assert "timed under load" in (tmp_path / "p.md").read_text()


def test_the_flag_rule_is_the_cpu_count_times_the_documented_share() -> None:
    at = load.Load(load_1m=16 * load.LOADED_SHARE, cpu_count=16, gpu_processes=None, cpu_timed=True)
    assert load.flags(at) == [] and load.flags(replace(at, load_1m=16 * load.LOADED_SHARE + 0.1))


def test_the_session_reads_the_load_average_and_cpu_count(monkeypatch) -> None:
    monkeypatch.setattr(os, "getloadavg", lambda: (3.254, 2.0, 1.0))
    described = Machine(device="cpu", host="here")
    loaded = machine.loaded(described, torch.device("cpu"))
    assert loaded == replace(described, load_1m=3.25, cpu_count=os.cpu_count())  # no GPU here

    def unavailable() -> tuple[float, float, float]:
        raise OSError("no load average here")

    monkeypatch.setattr(os, "getloadavg", unavailable)
    assert machine.loaded(described, torch.device("cpu")).load_1m is None


def test_this_process_and_its_workers_are_ours() -> None:
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) as child:
        try:
            assert {os.getpid(), child.pid} <= machine._ours()
            assert os.getppid() not in machine._ours()
        finally:
            child.kill()


def fake_nvml(monkeypatch, pids: list[int], holds_context: bool) -> None:
    running = [types.SimpleNamespace(pid=pid) for pid in pids]
    nvml = types.SimpleNamespace(nvmlDeviceGetComputeRunningProcesses=lambda handle: running)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr(hardware, "_handle", lambda nvml, device: "handle")
    monkeypatch.setattr(hardware, "_holds_context", lambda device: holds_context)


def test_other_gpu_processes_leave_out_ours(monkeypatch) -> None:
    cuda = torch.device("cuda:0")
    fake_nvml(monkeypatch, [100, 200, 300], holds_context=True)
    assert hardware.other_processes(cuda, {100, 101}) == 2
    # NVML speaking the host's process ids: none is ours by id, one is this process
    fake_nvml(monkeypatch, [9001, 9002], holds_context=True)
    assert hardware.other_processes(cuda, {100}) == 1
    fake_nvml(monkeypatch, [9001, 9002], holds_context=False)
    assert hardware.other_processes(cuda, {100}) == 2
    fake_nvml(monkeypatch, [], holds_context=True)
    assert hardware.other_processes(cuda, {100}) == 0


def test_without_nvml_the_gpu_processes_are_not_counted(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    assert hardware.other_processes(torch.device("cuda:0"), {os.getpid()}) is None


@pytest.mark.parametrize("gpu_processes", [None, 3])
def test_the_load_cell_says_what_was_recorded(gpu_processes: int | None) -> None:
    run = record("p", "s", busy={**QUIET, "gpu_processes": gpu_processes})
    expected = "12.0/16" if gpu_processes is None else "12.0/16 +3 on GPU loaded"
    assert load.cell(run) == expected
    assert load.cell(record("p", "s")) == "-"
    assert load.side_summary([run, record("p", "t", busy=BUSY)]).startswith("12.0-24.3/16")
