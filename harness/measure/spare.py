"""A spare worker's side (harness.run.isolate.Spare): a worker started before its job.

It imports what every job imports (torch, the harness, the extension builder, the profiler's
Python side) while the slot's current jobs run, touching no device, and says so (`Imported`).
Told to warm up, it starts CUDA on its device and the profiler once (what every job's load step
does first); the slot asks that only of the next job's spare, only while its current job is not
timing, and holds that job's time step until the spare is warm (the `gate` of
harness.measure.worker.main). Then it waits for its job and runs it as a fresh worker would.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from harness import toolchain
from harness.measure import worker
from harness.measure.events import Imported, Warm, Warmed


def waiting(jobs: Any, conn: Any) -> None:
    """The spare's entry point: it says Imported on `conn` once its imports are done; messages
    on `jobs` are Warm, answered with Warmed on `conn`, then the Job; the same pipe is the
    job's gate. A parent that closes the pipe without a job ends it quietly."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    worker.die_with_parent()  # also while paused (SIGSTOP) by its slot during a timing
    cuda_home = toolchain.find_cuda_home()  # as the job will set it; else torch warns here
    if cuda_home:
        os.environ["CUDA_HOME"] = cuda_home
    import torch.profiler
    import torch.utils.cpp_extension  # noqa: F401

    conn.send(Imported())
    while True:
        try:
            message = jobs.recv()
        except (EOFError, OSError):
            return
        if isinstance(message, Warm):
            conn.send(Warmed(warm(message.device)))
            continue
        worker.STARTED_AHEAD = True
        worker.entry(message, conn, jobs)
        return


def warm(device: str) -> str | None:
    """Start CUDA on `device` and the profiler once (on the host: profiling.warm_up); why it
    failed, or None."""
    import torch

    from harness.measure import profiling

    try:
        if device.startswith("cuda"):
            where = torch.device(device)
            torch.cuda.set_device(where)
            torch.zeros(1, device=where)
            torch.cuda.synchronize(where)
            profiling.warm_up(where)
    except Exception as err:  # the job will meet it again, and report it
        return f"{type(err).__name__}: {err}"
    return None
