"""How close a kernel comes to the memory system's ceiling.

The ceiling is the device's copy bandwidth: a large `dst.copy_(src)` timed with CUDA events,
counting the bytes read plus the bytes written. It is measured once per GPU model (and torch
version) and kept in `<results>/<machine>/ceiling.json`, so every row of every run on that GPU
is judged against the same figure. A kernel's achieved bandwidth is the bytes its problem must
move over its median time; more than the ceiling means a warm cache, a wrong byte count, or a
solution that skips work, and the tables flag it.
"""

from __future__ import annotations

import datetime
import json
import statistics
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from harness import codec, files
from harness.loading import Problem
from harness.record import Ceiling, Machine

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
        files.write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
    return replace(measured, cached=False)
