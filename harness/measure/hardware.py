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
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from harness import codec
from harness.loading import Problem
from harness.record import Bound, Ceiling, GpuState, Machine

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


# Dense peak rates (TFLOP/s) by the precision a GPU's units compute in, from NVIDIA's data
# sheets (SXM parts unless named; FP64 on the tensor cores): the speed of light's compute side.
# The first key found in the GPU's name wins. A GPU not named here has no compute bound.
PEAK_TFLOPS: dict[str, dict[str, float]] = {
    "H200": {"fp64": 67, "fp32": 67, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9},
    "H100 PCIe": {"fp64": 51, "fp32": 51, "tf32": 378, "bf16": 756, "fp16": 756, "fp8": 1513},
    "H100": {"fp64": 67, "fp32": 67, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9},
    "A100": {"fp64": 19.5, "fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312},
}
FLOP_CLASSES = {
    torch.float64: "fp64",
    torch.float32: "fp32",
    torch.bfloat16: "bf16",
    torch.float16: "fp16",
    torch.float8_e4m3fn: "fp8",
    torch.float8_e5m2: "fp8",
}
# Operations the FLOP counter has no formula for but that do much arithmetic, by a word of
# their name: where the reference runs one, its FLOP count misses work, and its bound says so.
OPAQUE_WORDS = {"rnn", "lstm", "gru", "cholesky", "svd", "eig", "eigh", "solve", "attention"}
OPAQUE_WORDS |= {"mm", "bmm", "matmul", "einsum", "dot", "mv", "tensordot", "baddbmm", "addmm"}
OPAQUE_PREFIXES = ("conv", "fft", "linalg")


def opaque(op: str) -> bool:
    """Whether the operation named `op` ("aten._cudnn_rnn") does arithmetic that no FLOP
    formula counted: an arithmetic-heavy name (OPAQUE_WORDS), or not one of ATen's at all."""
    namespace, _, name = op.partition(".")
    words = name.split(".")[0].split("_")
    heavy = any(w in OPAQUE_WORDS or w.startswith(OPAQUE_PREFIXES) for w in words)
    return heavy or namespace not in ("aten", "prims")


@dataclass(frozen=True)
class Work:
    """What any correct solution of one benchmark must do: the speed-of-light bound's inputs."""

    # a forward: inputs read once, outputs written once, the reference's weights read once;
    # a backward pass: what `pass_work` counts
    bytes: int
    flops: int | None  # the reference's floating-point operations, as counted or declared
    bound: Bound  # their precision and its peak; why the count misses work, if it does


def work(
    problem: Problem, reference: torch.nn.Module, inputs: list[Any], device: torch.device
) -> tuple[Any, Work]:
    """The reference's output on `inputs`, from one run under torch's FLOP formulas
    (torch.utils.flop_counter), and the work it stands for. Declared counts win: a problem's
    count_bytes replaces the bytes, its count_flops the FLOPs (counted at the inputs' precision).
    """
    with torch.no_grad():
        output, counter = counted(lambda: reference(*inputs))
    moved = tensor_bytes(inputs) + tensor_bytes(output) + weight_bytes(reference)
    if problem.count_bytes:
        moved = problem.count_bytes(inputs, output)
    flops, flop_class, partial = counter.total()
    if problem.count_flops:
        flops, flop_class, partial = problem.count_flops(inputs, output), _class(inputs), None
    return output, _bounded(int(moved), flops, flop_class, partial, device)


def pass_work(
    problem: Problem,
    forward: tuple[Any, Work],
    backward: Counting,
    moved: tuple[Any, Any],
    both: bool,
    device: torch.device,
) -> Work:
    """The work of one backward pass (harness.measure.gradients) of a benchmark whose forward
    gave `forward` (its output and `work`), from its `backward` counted as `work` counts a
    forward. Bytes: `moved`, what the backward must read (the upstream gradients) and write (the
    gradients). With `both` (forward+backward) the forward's FLOPs are added, and its bytes less
    its output, which a fused pass need not write (a declared count_bytes is added whole).
    """
    output, done = forward
    flops, flop_class, partial = backward.total()
    moved_bytes = tensor_bytes(list(moved))
    if both:
        flops = (flops or 0) + (done.flops or 0) or None
        classes = [c for c in (flop_class, done.bound.flop_class) if c]
        flop_class = max(classes, key=_class_rank, default=None)
        partial = "; ".join(p for p in (done.bound.partial, partial) if p) or None
        unwritten = 0 if problem.count_bytes else tensor_bytes(output)
        moved_bytes += done.bytes - unwritten
    return _bounded(moved_bytes, flops, flop_class, partial, device)


def weight_bytes(model: Any) -> int:
    """Bytes of a module's parameters and buffers (0 for a plain callable)."""
    if not isinstance(model, torch.nn.Module):
        return 0
    return sum(tensor_bytes(t) for t in (*model.parameters(), *model.buffers()))


def counted(call: Callable[[], Any]) -> tuple[Any, Counting]:
    """What `call()` returns, run once under the FLOP count (`Counting`)."""
    counter = Counting()
    with counter:
        return call(), counter


def _bounded(
    moved: int,
    flops: float | None,
    flop_class: str | None,
    partial: str | None,
    device: torch.device,
) -> Work:
    """A Work whose peak is `flop_class`'s on `device` (a bound without one says why)."""
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    peak = peak_tflops(gpu, flop_class) if gpu else None
    if gpu and flops and peak is None and not partial:
        partial = f"no {flop_class} peak known for {gpu} (harness.measure.hardware.PEAK_TFLOPS)"
    count = None if flops is None else int(flops)
    return Work(moved, count, Bound(flop_class, peak, partial))


def peak_tflops(gpu: str, flop_class: str | None) -> float | None:
    """The dense peak of `flop_class` on the GPU named `gpu` (PEAK_TFLOPS), else None."""
    for name, peaks in PEAK_TFLOPS.items():
        if name in gpu:
            return peaks.get(flop_class or "")
    return None


class Counting(TorchDispatchMode):
    """Counts the FLOPs of each operation that torch's FLOP counter has a formula for, by the
    precision it runs at, and names the arithmetic-heavy ones it has none for (`opaque`)."""

    def __init__(self) -> None:
        super().__init__()
        self.flops: dict[str, int] = {}
        self.unseen: set[str] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func._overloadpacket
        formula = flop_registry.get(packet)
        if formula is None:  # most operations: no arithmetic counted, unless it is opaque
            if opaque(str(packet)):
                self.unseen.add(str(packet))
            return out
        kind = _class(args, tf32=_tf32(str(packet)))
        try:
            if kind is not None:
                count = int(formula(*args, **kwargs, out_val=out))
                self.flops[kind] = self.flops.get(kind, 0) + count
        except Exception:  # a formula that cannot read these arguments: its work is unseen
            self.unseen.add(str(packet))
        return out

    def total(self) -> tuple[int | None, str | None, str | None]:
        """The FLOPs counted (None: none), the counted precision with the highest peak (a
        safe bound for them all), and why the count misses work, if it does."""
        unseen = ", ".join(sorted(self.unseen))
        fastest = max(self.flops, key=_class_rank, default=None)
        partial = f"no FLOP formula for {unseen}" if unseen else None
        return sum(self.flops.values()) or None, fastest, partial


def _class_rank(flop_class: str) -> float:
    """A precision's peak on an H100: which of several precisions bounds the fastest."""
    return PEAK_TFLOPS["H100"].get(flop_class, 0.0)


def _tf32(op: str) -> bool:
    """Whether float32 runs on TF32 tensor cores for `op` as torch is set: convolutions
    (cuDNN's default) and matrix products (off by default) each have a switch."""
    if "conv" in op:
        return bool(torch.backends.cudnn.allow_tf32)
    return bool(torch.backends.cuda.matmul.allow_tf32)


def _class(values: Any, tf32: bool = False) -> str | None:
    """The precision of the first floating-point tensor in `values` (FLOP_CLASSES; float32 as
    "tf32" where `tf32`), else None."""
    for value in values if isinstance(values, (list, tuple)) else (values,):
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            kind = FLOP_CLASSES.get(value.dtype)
            return "tf32" if kind == "fp32" and tf32 and value.is_cuda else kind
    return None


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
