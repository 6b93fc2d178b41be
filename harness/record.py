"""The record of one solution's run, and the run log that holds them: the one module that writes
and reads `results/<machine>/runs.jsonl`.

A record is built once, when its run is over, and never changed: every class here is frozen.
Timings keep their raw samples (`Measurement.times_us`); their statistics are derived from them,
so a record cannot disagree with itself. The JSON form (harness.codec, one line per record) is the
one every run has written; records from before a key existed read with None in its place
(`BenchRow.speedup`, `mode`, `stop`, ...), never with a made-up value. Besides records, the log
may hold removal lines (run.py --forget): a record is never edited or deleted.
"""

from __future__ import annotations

import datetime
import sys
from dataclasses import dataclass, field
from pathlib import Path

from harness import codec
from harness.codec import omitted_when
from harness.settings import REPO, Settings
from harness.stats import Interval, Measurement, PerCall

LOG_NAME = "runs.jsonl"
FORGET = "forget"  # the kind of a log line that drops the earlier records of one solution
OMIT_NONE = omitted_when(None)  # a key written only where it applies


@dataclass(frozen=True)
class GpuState:
    """The GPU's SM clock and temperature over a row's samples (harness.measure.hardware)."""

    sm_mhz: tuple[int, ...]  # lowest and highest
    temp_c: tuple[int, ...]  # lowest and highest
    throttled_samples: int
    samples: int | None = None
    reasons: tuple[str, ...] = ()  # why the throttled samples were throttled


@dataclass(frozen=True)
class CompileBaseline:
    """The torch.compile'd reference a row is compared with (harness.results.baselines)."""

    median_us: float
    median_low_us: float | None
    median_high_us: float | None
    compile_s: float | None  # how long compiling took, kept out of the samples
    cached: bool  # measured by an earlier run
    measured_at: str | None
    mismatch: str | None  # how its output differs from eager's: then it is no baseline


@dataclass(frozen=True)
class CompiledRow:
    """One shape of the torch.compile baseline job: eager and the compiled reference timed side
    by side, compile time apart (harness.measure.compiled). Kept in
    baselines.jsonl with the key it is cached under (harness.results.baselines)."""

    name: str
    inputs: tuple[str, ...]
    compiled: Measurement
    reference: Measurement | None = None  # eager, timed beside it
    speedup: Interval | None = None  # eager / compiled
    compile_s: float | None = None  # how long compiling took, kept out of the samples
    mismatch: str | None = None  # how its output differs from eager's: then it is no baseline
    mode: str | None = None  # the timer the row really got
    stop: str | None = None
    note: str | None = None
    state: GpuState | None = None


@dataclass(frozen=True)
class Witness:
    """What Nsight Compute counted for one call of the solution (run.py --ncu,
    harness.run.ncu): bytes its kernels read from and wrote to DRAM, and wrote to L2."""

    kernels: int
    dram_read: int
    dram_write: int
    l2_write: int  # the writes as they reach L2 (which can hold them back from DRAM)

    @property
    def moved(self) -> int:
        """The bytes the call moved: read from DRAM, and written as far as L2 at least (a
        write that stays in L2 when the kernel ends is counted there, not in DRAM)."""
        return self.dram_read + max(self.dram_write, self.l2_write)


@dataclass(frozen=True)
class Bound:
    """The compute side of a benchmark's speed-of-light bound (harness.measure.hardware.work):
    the precision its FLOPs run at, that precision's peak on the GPU, and why the bound misses
    work (an operation the FLOP counter cannot see into), where it does."""

    flop_class: str | None = None  # "fp32", "tf32", "bf16", "fp16", "fp8", "fp64"
    peak_tflops: float | None = None  # dense, from the data sheet; None: GPU or class unknown
    partial: str | None = None


@dataclass(frozen=True)
class BenchRow:
    """One benchmark shape, timed: the solution and eager PyTorch side by side.

    Old records lack what was added later: `speedup` (the paired interval), `mode`, `stop`,
    the roofline counts, the GPU state, `spot_checks`; those read as None.
    """

    name: str
    inputs: tuple[str, ...]  # "float32[512,1024]", one per input
    reference: Measurement
    solution: Measurement
    speedup: Interval | None = None  # median of the per-round ratios reference / solution
    mode: str | None = None  # the timer the row really got
    stop: str | None = None  # why sampling stopped: "target", "budget" or "cap"
    note: str | None = None
    state: GpuState | None = None
    floor_us: float | None = None  # the launch floor of the timer
    launch_bound: bool | None = None
    bytes: int | None = None  # what the problem must move ...
    flops: int | None = None  # ... and compute
    # what the speed-of-light bound needs beside them, where the FLOPs were counted
    bound: Bound | None = field(default=None, metadata=OMIT_NONE)
    # timed calls whose output was checked (not in graph mode)
    spot_checks: int | None = field(default=None, metadata=OMIT_NONE)
    # the wall-clock cross-check per call (not in graph mode)
    wall_us: float | None = field(default=None, metadata=OMIT_NONE)
    compile: CompileBaseline | None = field(default=None, metadata=OMIT_NONE)
    # speedup over `compile`, unless it gave a wrong answer
    vs_compile: Interval | None = field(default=None, metadata=OMIT_NONE)
    # what Nsight Compute counted (run.py --ncu)
    witness: Witness | None = field(default=None, metadata=OMIT_NONE)
    # "backward" or "forward+backward": a pass's row, else None
    backward: str | None = field(default=None, metadata=OMIT_NONE)
    # host time included (GPU rows; None in older records)
    per_call: PerCall | None = field(default=None, metadata=OMIT_NONE)
    # "reference" or "solution": per-call and device speedups part
    host_bound: str | None = field(default=None, metadata=OMIT_NONE)
    # the solution's timed calls by the parent's clock over the time its reported samples
    # account for (harness.run.refereeing: 1 where they agree; None before the referee)
    outside_ratio: float | None = field(default=None, metadata=OMIT_NONE)
    # on a CPU, the share of the processors other processes took while it was timed (its
    # interval widened for it: harness.run.rounds.Sampling.speedup); None before 2026-12-07
    others_cpu_share: float | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class Build:
    """An extension the solution built while it was imported."""

    name: str
    cuda: bool
    seconds: float | None = None
    cached: bool = field(default=False, metadata=omitted_when(False))  # from the build cache
    # how it could build faster (harness.measure.builds.slow_header)
    hint: str | None = field(default=None, metadata=OMIT_NONE)
    # what its CUDA units read for <torch/extension.h>: "torch/types.h" or "as written"
    # (harness.measure.builds); None where none includes it, and in older records
    cuda_header: str | None = field(default=None, metadata=OMIT_NONE)

    def describe(self) -> str:
        """One phrase for the console: compiled in how long, or loaded from the cache."""
        if self.cached:
            return f"{self.name} compiled earlier (loaded from the build cache)"
        return f"{self.name} compiled in {self.seconds or 0:.0f} s"


@dataclass(frozen=True)
class Ceiling:
    """The GPU's copy bandwidth, the roof of the 'of copy' column (harness.measure.hardware)."""

    copy_gbps: float
    copy_bytes: int | None = None
    gpu: str | None = None
    torch: str | None = None
    driver: str | None = None
    measured: str | None = None  # when, ISO 8601
    cached: bool | None = None  # read from ceiling.json rather than measured by this run


@dataclass(frozen=True)
class Machine:
    """The machine a run happened on (harness.run.machine.describe). The GPU's own fields
    (capability to driver) are written only where there is a GPU, and its load when the
    solution's run began (load_1m to gpu_processes, harness.run.machine.loaded) only where it was
    read, as in records from before it was."""

    device: str | None = None
    gpu: str | None = None
    torch: str | None = None
    cuda: str | None = None
    python: str | None = None
    platform: str | None = None
    cpu: str | None = None
    host: str | None = None
    commit: str | None = None  # "-dirty" when tracked files differed from it
    time: str | None = None
    capability: str | None = field(default=None, metadata=OMIT_NONE)
    sm_count: int | None = field(default=None, metadata=OMIT_NONE)
    l2_bytes: int | None = field(default=None, metadata=OMIT_NONE)
    memory_bytes: int | None = field(default=None, metadata=OMIT_NONE)
    driver: str | None = field(default=None, metadata=OMIT_NONE)
    # the 1-minute load average (os.getloadavg)
    load_1m: float | None = field(default=None, metadata=OMIT_NONE)
    # the host's logical CPUs, which that average is shared by
    cpu_count: int | None = field(default=None, metadata=OMIT_NONE)
    # other processes on the GPU (NVML, where it is available)
    gpu_processes: int | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class Finding:
    """One thing the audit found in a problem (harness.measure.audit), in one line: what is
    wrong and how to fix the problem file."""

    level: str  # "reject" (it cannot be judged), "weak" (a wrong solution could pass), "warn"
    check: str  # zero_passes, constant, seed_independent, insensitive, random,
    # nondeterministic, one_shape, error
    case: str | None  # the case it was found in; None for the problem as a whole
    message: str


@dataclass(frozen=True)
class RunRecord:
    """One solution's run: what ran, where, how, and what came of it (verdicts.MEANING).

    `device`, `builds` and `build_s` are None where the run never got that far, `reason` unless
    the solution broke a rule, and the shares where no kernel was profiled (a CPU, an old
    record); each is then left out of the JSON. `ceiling` is None on a CPU and in old records.
    """

    run_id: str
    time: str  # when the record was made, ISO 8601 UTC
    problem: str
    reference: str  # the reference's path, relative to the repository where inside it
    solution: str  # the file's stem
    solution_path: str  # tells two files of one name apart
    solution_hash: str
    log: str | None  # the worker's log, where one was written
    cases: int
    settings: Settings
    machine: Machine
    status: str
    detail: str
    checks: int  # correctness checks passed
    benchmarks: tuple[BenchRow, ...] = ()
    warnings: tuple[str, ...] = ()
    ceiling: Ceiling | None = None
    # where the solution ran ("cpu" for a C++ one on a GPU machine)
    device: str | None = field(default=None, metadata=OMIT_NONE)
    # the rule a "rejected" solution broke
    reason: str | None = field(default=None, metadata=OMIT_NONE)
    builds: tuple[Build, ...] | None = field(default=None, metadata=OMIT_NONE)
    build_s: float | None = field(default=None, metadata=OMIT_NONE)
    # Of the solution's device time in its profiled call, from 0 to 1 (harness.measure.profiling):
    # in its own kernels,
    own_share: float | None = field(default=None, metadata=OMIT_NONE)
    # ... and in kernels the reference launches too
    reference_share: float | None = field(default=None, metadata=OMIT_NONE)
    # the reference's sources (harness.toolchain.source_hash)
    reference_hash: str | None = field(default=None, metadata=OMIT_NONE)
    # seconds in each step of the worker (isolate)
    phase_s: dict[str, float] | None = field(default=None, metadata=OMIT_NONE)
    # ... and in each part of those steps (harness.stats)
    parts_s: dict[str, float] | None = field(default=None, metadata=OMIT_NONE)
    # what the audit found weak in the problem: a wrong solution could pass it
    weaknesses: tuple[Finding, ...] = field(default=(), metadata=omitted_when(()))


def append(folder: Path, record: RunRecord) -> None:
    """Append `record` to the folder's run log as one JSON line (whole, even when several
    runs write the folder at once)."""
    codec.append(folder, codec.encode(record), LOG_NAME)


def forget(folder: Path, problem: str, solution: str) -> list[str]:
    """Drop `solution` of `problem` (its name, or its path as given or recorded) from what the
    folder's log reads as: one removal line per matching solution path is appended, so the log
    stays append-only, and a later run of the solution shows again. Returns the paths dropped."""
    paths = matching(read(folder), problem, solution)
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    for path in paths:
        line = {"kind": FORGET, "problem": problem, "solution_path": path, "time": stamp}
        codec.append(folder, line, LOG_NAME)
    return paths


def matching(records: list[RunRecord], problem: str, solution: str) -> list[str]:
    """The recorded paths of `solution` of `problem` among `records`: its name, or its path as
    given or recorded."""
    given = Path(solution).resolve()
    return sorted(
        {
            r.solution_path
            for r in records
            if r.problem == problem
            and (solution in (r.solution, r.solution_path) or REPO / r.solution_path == given)
        }
    )


def read(folder: Path) -> list[RunRecord]:
    """Every record of the folder's run log, oldest first, less those a later removal line
    dropped (`forget`). A line that is neither (torn by a killed writer, or edited by hand) is
    skipped with a warning."""
    records: list[RunRecord] = []
    skipped = 0
    for data in codec.read(folder, LOG_NAME):
        if data.get("kind") == FORGET:
            gone = (data.get("problem"), data.get("solution_path"))
            records = [r for r in records if (r.problem, r.solution_path) != gone]
            continue
        try:
            records.append(codec.decode(RunRecord, data))
        except (KeyError, TypeError, ValueError):
            skipped += 1
    if skipped:
        path = folder / LOG_NAME
        print(f"warning: {path}: skipped {skipped} line(s) that are not records", file=sys.stderr)
    return records
