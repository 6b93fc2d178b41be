"""How close a kernel comes to the memory system's ceiling.

The ceiling is the device's copy bandwidth: a large `dst.copy_(src)` timed with CUDA events,
counting the bytes read plus the bytes written. It is measured once per GPU model (and torch
version) and kept in `<results>/<machine>/ceiling.json`, so every row of every run on that GPU
is judged against the same figure. A kernel's achieved bandwidth is the bytes its problem must
move over its median time; more than the ceiling means a warm cache, a wrong byte count, or a
solution that skips work, and the tables flag it.

Read the GPU's SM clock, temperature and throttle reasons through NVML, never changing them.

NVML comes from the `nvidia-ml-py` package (module `pynvml`). Where it or the driver is missing,
`open_probe` returns None and rows simply carry no machine state, and `other_processes` (the
session's count of who else uses the GPU) returns None.
"""

from __future__ import annotations

import datetime
import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from harness import codec
from harness.loading import Problem
from harness.record import Ceiling, GpuState, Machine

CEILING_NAME = "ceiling.json"
COPY_BYTES = 1 << 30  # 1 GiB each way: far beyond any L2, so no cache helps
COPY_REPS = 30


def tensor_bytes(value: Any) -> int:
    """Bytes of every tensor in `value` (nested lists and tuples too), each counted once."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(v) for v in value)
    return 0


def counts(problem: Problem, inputs: list[Any], output: Any) -> tuple[int, int | None]:
    """Bytes to move (the problem's count, else inputs read once plus outputs written once)
    and floating-point operations (the problem's count, else None)."""
    moved = problem.count_bytes or (lambda i, o: tensor_bytes(i) + tensor_bytes(o))
    flops = problem.count_flops(inputs, output) if problem.count_flops else None
    return int(moved(inputs, output)), None if flops is None else int(flops)


def measure_copy(device: torch.device) -> Ceiling:
    """Copy bandwidth of `device` in GB/s (read + write bytes over the median copy time)."""
    src = torch.empty(COPY_BYTES // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    pairs = []
    for _ in range(COPY_REPS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        pairs.append((start, end))
    torch.cuda.synchronize(device)
    median_us = statistics.median(s.elapsed_time(e) * 1e3 for s, e in pairs)
    del src, dst
    torch.cuda.empty_cache()
    return Ceiling(copy_gbps=2 * COPY_BYTES / median_us / 1e3, copy_bytes=COPY_BYTES)


def ceiling(
    folder: Path,
    device: torch.device,
    machine: Machine,
    store: bool = True,
    measure: Callable[[], Ceiling] | None = None,
) -> Ceiling | None:
    """The cached ceiling of this GPU model and torch version, measured first if missing (by
    `measure`, else measure_copy here) and cached in `folder` unless not `store`."""
    if device.type != "cuda":
        return None
    path = folder / CEILING_NAME
    gpu, torch_version = machine.gpu, machine.torch
    if path.exists():
        try:
            cached = codec.decode(Ceiling, json.loads(path.read_text(encoding="utf-8")))
        except (json.JSONDecodeError, TypeError, ValueError):
            cached = None
        if cached and (cached.gpu, cached.torch) == (gpu, torch_version):
            return replace(cached, cached=True)
    copy = measure() if measure else measure_copy(device)
    measured = Ceiling(
        copy_gbps=copy.copy_gbps,
        copy_bytes=copy.copy_bytes,
        gpu=gpu,
        torch=torch_version,
        driver=machine.driver,
        measured=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )
    if store:
        data = {k: v for k, v in codec.encode(measured).items() if k != "cached"}
        codec.write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
    return replace(measured, cached=False)


# Throttle reasons that slow the clock below what the workload asks for. Idle, application
# clock settings and sync boost are not throttling.
THROTTLING = {
    0x4: "power cap",
    0x8: "hardware slowdown",
    0x40: "thermal (software)",
    0x80: "thermal (hardware)",
    0x100: "power brake",
}


@dataclass(frozen=True)
class Reading:
    sm_mhz: int
    temp_c: int
    reasons: int  # NVML's bit mask

    @property
    def throttled(self) -> list[str]:
        return [name for bit, name in THROTTLING.items() if self.reasons & bit]


@dataclass
class Probe:
    """Reads one GPU; `log` keeps (samples since the last reading, reading) pairs."""

    nvml: Any
    handle: Any
    log: list[tuple[int, Reading]] = field(default_factory=list)

    def read(self) -> Reading:
        nvml = self.nvml
        getter = (
            getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or nvml.nvmlDeviceGetCurrentClocksThrottleReasons  # before driver 535's rename
        )
        return Reading(
            sm_mhz=int(nvml.nvmlDeviceGetClockInfo(self.handle, nvml.NVML_CLOCK_SM)),
            temp_c=int(nvml.nvmlDeviceGetTemperature(self.handle, nvml.NVML_TEMPERATURE_GPU)),
            reasons=int(getter(self.handle)),
        )

    def after(self, samples: int) -> None:
        """Record a reading for the `samples` just taken (the sampler's after_batch hook)."""
        self.log.append((samples, self.read()))

    def summary(self) -> GpuState | None:
        """Clock and temperature ranges over the log, and how many samples were throttled."""
        if not self.log:
            return None
        readings = [r for _, r in self.log]
        return GpuState(
            sm_mhz=(min(r.sm_mhz for r in readings), max(r.sm_mhz for r in readings)),
            temp_c=(min(r.temp_c for r in readings), max(r.temp_c for r in readings)),
            throttled_samples=sum(n for n, r in self.log if r.throttled),
            samples=sum(n for n, _ in self.log),
            reasons=tuple(sorted({name for r in readings for name in r.throttled})),
        )


def open_probe(device: torch.device) -> Probe | None:
    """A probe of `device` (a CUDA device), or None where NVML is not available."""
    try:
        import pynvml

        probe = Probe(pynvml, _handle(pynvml, device))
        probe.read()
    except Exception as err:  # no package, no driver, an old driver: rows go without state
        print(f"machine state not recorded: {type(err).__name__}: {err}", flush=True)
        return None
    return probe


def other_processes(device: torch.device, ours: set[int]) -> int | None:
    """How many processes besides `ours` hold a context on `device` (NVML's compute
    processes), or None where NVML is not available.

    NVML may list processes by the host's ids while this process sees those of its container;
    then none of `ours` is found, and where this process holds a context on the device, one
    listed process is taken to be this one.
    """
    try:
        import pynvml

        running = pynvml.nvmlDeviceGetComputeRunningProcesses(_handle(pynvml, device))
    except Exception:  # no package, no driver, an old driver: the count is not recorded
        return None
    listed = {int(process.pid) for process in running}
    if listed & ours or not _holds_context(device):
        return len(listed - ours)
    return max(len(listed) - 1, 0)


def _handle(nvml: Any, device: torch.device) -> Any:
    """NVML's handle of `device`, found by its UUID (NVML and CUDA may number GPUs apart)."""
    nvml.nvmlInit()
    uuid = str(torch.cuda.get_device_properties(device).uuid)
    return nvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")


def _holds_context(device: torch.device) -> bool:
    """Whether this process has made its CUDA context on `device` (where torch cannot tell,
    whether it has initialised CUDA at all)."""
    has_context = getattr(torch._C, "_cuda_hasPrimaryContext", None)
    try:
        return bool(has_context(device.index or 0)) if has_context else torch.cuda.is_initialized()
    except RuntimeError:
        return torch.cuda.is_initialized()
