"""run.py --ncu: an independent witness that the work was done.

After a solution is judged `ok` on a GPU, each benchmark's call is made once more in a fresh
process launched by Nsight Compute (harness.measure.witness), which counts the bytes its
kernels move: read from DRAM, written to DRAM, and written to L2. ncu empties the caches before
each kernel it profiles, so every byte a kernel reads comes from DRAM once at least; a write
can stay in L2 (tens of MB) when the kernel ends, so writes are counted where they reach
L2. A call that moves less than the problem's minimum (`count_bytes`, else its inputs and
outputs once) skipped work, or the count is wrong; the table flags it (harness.results.report).

It is a witness, not a judge: the row keeps its status. A solution that behaves differently
under the profiler can fool it, and a copy made by the copy engine (cudaMemcpy) is not a kernel
and is not counted.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from harness import codec, toolchain
from harness.job import Job
from harness.record import BenchRow, Witness
from harness.settings import REPO, Settings

METRICS = {  # ncu metric: Witness field (L2 writes are counted in 32-byte sectors)
    "dram__bytes_read.sum": "dram_read",
    "dram__bytes_write.sum": "dram_write",
    "lts__t_sectors_op_write.sum": "l2_write",
}
SECTOR_BYTES = 32
NCU_FOLDERS = ("/opt/nvidia/nsight-compute",)  # where NVIDIA's containers put it


def find_ncu() -> str | None:
    """The ncu executable: on PATH, in the CUDA toolkit's bin, or in Nsight Compute's folder."""
    found = shutil.which("ncu")
    if found:
        return found
    home = toolchain.find_cuda_home()
    candidates = [Path(home) / "bin" / "ncu"] if home else []
    for folder in NCU_FOLDERS:
        candidates += [Path(folder) / "ncu", *sorted(Path(folder).glob("*/ncu"), reverse=True)]
    return next((str(c) for c in candidates if os.access(c, os.X_OK)), None)


def command(ncu: str, spec: Path, index: int, report: Path) -> list[str]:
    """ncu counting the metrics of the one call that harness.measure.witness marks."""
    return [
        ncu,
        "--csv",
        "--print-units",
        "base",
        "--profile-from-start",
        "off",
        "--metrics",
        ",".join(METRICS),
        "--log-file",
        str(report),
        sys.executable,
        "-m",
        "harness.measure.witness",
        str(spec),
        str(index),
    ]


def parse(report: str) -> Witness:
    """The totals over every kernel of ncu's CSV report; no table: no kernel was profiled."""
    lines = report.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    totals = dict.fromkeys(METRICS.values(), 0)
    kernels = set()
    for row in csv.DictReader(lines[start:] if start is not None else []):
        field = METRICS.get(row.get("Metric Name") or "")
        if field is None:
            continue
        value = (row.get("Metric Value") or "").replace(",", "")
        try:
            totals[field] += round(float(value))
        except ValueError:
            raise ValueError(f"ncu gave {value!r} for {row['Metric Name']}") from None
        kernels.add(row.get("ID"))
    return Witness(
        kernels=len(kernels),
        dram_read=totals["dram_read"],
        dram_write=totals["dram_write"],
        l2_write=totals["l2_write"] * SECTOR_BYTES,
    )


def witness_rows(
    settings: Settings,
    device: str,
    spec: Job,
    rows: list[BenchRow],
    log: Path,
    note: Callable[[str], None],
) -> tuple[list[BenchRow], list[str]]:
    """`rows` with what ncu counted for each benchmark's call, and warnings for what it could
    not count. `device` is where the solution ran, `spec` the job to run once (by
    harness.measure.witness); ncu's own output and the call's go to `log`."""
    if not device.startswith("cuda"):
        return rows, ["ncu witness skipped: the solution ran on the CPU"]
    ncu = find_ncu()
    if ncu is None:
        return rows, ["ncu witness skipped: no ncu (Nsight Compute) on PATH or in CUDA_HOME/bin"]
    log.parent.mkdir(parents=True, exist_ok=True)
    spec_path = log.with_suffix(".ncu.json")
    spec_path.write_text(json.dumps(codec.encode(spec)), encoding="utf-8")
    witnessed, warnings = [], []
    index = -1  # the benchmark's place among the forward rows
    for row in rows:
        if row.backward:  # a backward pass's row: no witness
            witnessed.append(row)
            continue
        index += 1
        note(f"ncu: counting the bytes of one call on {row.name}")
        report = log.with_suffix(f".ncu{index}.csv")
        try:
            counted = _count(ncu, spec_path, index, report, log, settings.limits.run_s)
        except (OSError, ValueError, subprocess.SubprocessError) as err:
            warnings.append(f"ncu witness skipped on {row.name}: {err}")
            witnessed.append(row)
            continue
        witnessed.append(replace(row, witness=counted))
    return witnessed, warnings


def _count(ncu: str, spec: Path, index: int, report: Path, log: Path, limit_s: float) -> Witness:
    paths = [str(REPO), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    with log.open("a", encoding="utf-8") as out:
        out.write(f"\n--- ncu witness, benchmark {index} ---\n")
        out.flush()
        process = subprocess.Popen(
            command(ncu, spec, index, report),
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=env,
            start_new_session=True,  # so that a timeout ends the call's process with ncu
        )
        try:
            returncode = process.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise ValueError(f"ncu ran past the {limit_s:.0f} s limit (--timeout)") from None
    text = report.read_text(encoding="utf-8", errors="replace") if report.exists() else ""
    if returncode != 0:
        errors = [line for line in text.splitlines() if "ERROR" in line]
        why = errors[-1].strip() if errors else f"its output is in {log}"
        raise ValueError(f"ncu exited with status {returncode} ({why})")
    return parse(text)
