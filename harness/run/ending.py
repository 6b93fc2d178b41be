"""What a run starts ends with it: process trees found through /proc, and ended.

A worker dies with run.py (harness.measure.worker.die_with_parent), but what the worker started
does not: ninja, the compilers ninja puts in process groups of their own, a precompiled
header's compile. run.py is therefore the subreaper of what it starts (a process whose parent
died is re-parented to it, not to init, so it stays in run.py's tree); SIGTERM and SIGHUP stop
it as Ctrl-C does (KeyboardInterrupt: what was recorded is kept); and an interrupted run kills
every process still under it before it exits. Linux only (/proc, prctl); elsewhere a run
ends as before.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

PROC = Path("/proc")
PR_SET_CHILD_SUBREAPER = 36  # from <sys/prctl.h>
END_S = 5.0  # how long an interrupted run keeps killing what is under it (a fork meanwhile)
INTERRUPTED = 130  # run.py's exit status when interrupted (harness.run.flags)


def run_to_end(main: Callable[[], int]) -> int:
    """`main()`'s exit status, with SIGTERM and SIGHUP taken as Ctrl-C, and every process
    under this one killed where it was interrupted (KeyboardInterrupt, or status 130)."""
    for number in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, _interrupted)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1)
    code = INTERRUPTED
    try:
        code = main()
    except KeyboardInterrupt:
        print("\ninterrupted: results recorded before the interrupt are kept", file=sys.stderr)
    finally:
        if code == INTERRUPTED:
            for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(number, signal.SIG_IGN)  # a second signal must not cut this short
            end_tree(os.getpid())
    return code


def _interrupted(number: int, frame: object) -> None:
    raise KeyboardInterrupt


def end_tree(root: int) -> set[int]:
    """Kill (SIGKILL) every live process under `root`, `root` itself spared, walking again
    until none is left or END_S has passed; the pids killed."""
    killed: set[int] = set()
    deadline = time.monotonic() + END_S
    while time.monotonic() < deadline:
        found = [pid for pid in tree(root, children())[1:] if pid not in killed]
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
            killed.add(pid)
    return killed


def children() -> dict[int, list[int]]:
    """Every live process's children, from each one's parent in /proc/<pid>/stat (a zombie,
    dead and not yet reaped, is left out)."""
    found: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        state, parent = stat[stat.rindex(")") + 2 :].split()[:2]
        if state != "Z":
            found.setdefault(int(parent), []).append(int(entry.name))
    return found


def tree(root: int, children: dict[int, list[int]]) -> list[int]:
    """`root` and its descendants in `children`, parents before children."""
    order, at = [root], 0
    while at < len(order):
        order += children.get(order[at], [])
        at += 1
    return order
