"""How busy the machine was as a solution's run began (harness.run.machine.loaded records it), and
when a timed row is flagged for it.

A row timed on the CPU is flagged when the 1-minute load average was above the host's CPU count
(LOADED_SHARE of it): then, on average, runnable work waited for a CPU, and both the solution and
eager PyTorch (which use every CPU) were slowed. Nothing lower is flagged because the average
also holds the harness's own previous worker, which may have kept every CPU busy in the minute
before. A row timed on the GPU is flagged when other processes held a context on the GPU.
Records from before the load was recorded carry none, and are never flagged.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.record import RunRecord

LOADED_SHARE = 1.0  # a CPU row is flagged when the load average exceeds this share of the CPUs
# ... or, where the row says (harness.run.rounds.OthersShare), when other processes took this
# share of the CPUs while it was timed (its interval widened from OTHERS_IGNORED on)
OTHERS_FLAGGED = 0.05


def cpu_timed(run: RunRecord) -> bool:
    """Whether the run's rows were timed on the CPU (a C++ solution, or a machine without GPU)."""
    return run.device == "cpu" or not run.machine.gpu


@dataclass(frozen=True)
class Load:
    """A run's load as its table rows' columns (`cpu_timed` says which of them `flags` holds
    against)."""

    load_1m: float | None
    cpu_count: int | None
    gpu_processes: int | None
    cpu_timed: bool


def columns(run: RunRecord) -> Load:
    """The run's load, as its rows carry it."""
    machine = run.machine
    return Load(machine.load_1m, machine.cpu_count, machine.gpu_processes, cpu_timed(run))


def flags(busy: Load, share: float | None = None) -> list[str]:
    """What a reader must know about the load a row was timed under (none where not recorded);
    `share`: on a CPU, the share of the processors other processes took while it was timed,
    where the row has it (BenchRow.others_cpu_share)."""
    load, cpus, others = busy.load_1m, busy.cpu_count, busy.gpu_processes
    if busy.cpu_timed:
        if share is not None and share >= OTHERS_FLAGGED:
            return [
                f"timed under load: other processes took {100 * share:.0f}% of the CPUs "
                "meanwhile (its interval widened for it)"
            ]
        if load is not None and cpus and load > LOADED_SHARE * cpus:
            return [f"timed under load: load average {load:.1f} on {cpus} CPUs"]
    elif others:
        return [f"timed beside {others} other process(es) on the GPU"]
    return []


def cell(run: RunRecord) -> str:
    """'3.2/16' (load average over CPUs), '+2 on GPU' for other processes on it, 'loaded' where
    the run's rows are flagged for it; '-' where nothing was recorded."""
    machine = run.machine
    parts = []
    if machine.load_1m is not None:
        parts.append(f"{machine.load_1m:.1f}/{machine.cpu_count or '?'}")
    if machine.gpu_processes:
        parts.append(f"+{machine.gpu_processes} on GPU")
    if flags(columns(run)):
        parts.append("loaded")
    return " ".join(parts) or "-"


def side_summary(runs: list[RunRecord]) -> str:
    """The range of a side's loads, '0.4-3.1/16, up to 2 other GPU processes', or 'not
    recorded'."""
    recorded = [r.machine for r in runs if r.machine.load_1m is not None]
    if not recorded:
        return "not recorded"
    loads = [m.load_1m for m in recorded if m.load_1m is not None]
    cpus = sorted({str(m.cpu_count or "?") for m in recorded})
    low, high = min(loads), max(loads)
    text = (f"{low:.1f}" if low == high else f"{low:.1f}-{high:.1f}") + f"/{','.join(cpus)}"
    others = [m.gpu_processes for m in recorded if m.gpu_processes is not None]
    if others:
        text += f", up to {max(others)} other GPU process(es)"
    return text
