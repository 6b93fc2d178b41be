"""What NVML can tell from outside a process of the GPU's busy time (issue 59's outside check).

    python tuning/nvml_busy.py

A child process runs kernels of known length (torch.cuda._sleep) at several duty cycles for a
second each; this process, which starts no CUDA context, reads NVML's utilization samples
(nvmlDeviceGetSamples, GPU utilization) and the child's per-process utilization over each
second, and prints them beside the duty cycle the child ran.
"""

from __future__ import annotations

import multiprocessing
import time

import pynvml

DUTIES = (0.05, 0.25, 0.5, 0.9)
SECONDS = 1.0


def child(duties: tuple[float, ...], conn: object) -> None:
    import torch

    torch.zeros(1, device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(1_000_000)
    end.record()
    torch.cuda.synchronize()
    cycles_per_us = 1_000_000 / (start.elapsed_time(end) * 1e3)
    for duty in duties:
        conn.recv()  # type: ignore[attr-defined]
        began = time.perf_counter()
        busy_us = 0.0
        while time.perf_counter() - began < SECONDS:
            torch.cuda._sleep(int(100 * cycles_per_us))  # 100 us of kernel
            torch.cuda.synchronize()
            busy_us += 100
            idle = 100 * (1 - duty) / duty
            target = time.perf_counter() + idle / 1e6
            while time.perf_counter() < target:
                pass
        conn.send(busy_us / ((time.perf_counter() - began) * 1e6))  # type: ignore[attr-defined]


def main() -> None:
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    process = context.Process(target=child, args=(DUTIES, theirs))
    process.start()
    time.sleep(8)
    for duty in DUTIES:
        since = int(time.time() * 1e6)
        ours.send("go")
        measured = ours.recv()
        try:
            _, samples = pynvml.nvmlDeviceGetSamples(
                handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES, since
            )
            values = [(s.timeStamp - since, s.sampleValue.uiVal) for s in samples]
        except pynvml.NVMLError as err:
            values = [(-1, str(err))]
        try:
            per_process = [
                (p.pid, p.smUtil, p.timeStamp - since)
                for p in pynvml.nvmlDeviceGetProcessUtilization(handle, since)
            ]
        except pynvml.NVMLError as err:
            per_process = [("process", str(err), 0)]
        print(f"duty {duty:.2f} (child measured {measured:.3f}): samples {values}")
        print(f"  per process {per_process}")
    process.join(30)


if __name__ == "__main__":
    main()
