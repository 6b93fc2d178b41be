"""Process trees, found through /proc: what a run starts ends with it; a pool's builds held
still while a timing runs.

A worker dies with run.py (harness.measure.worker.die_with_parent), but what the worker started
does not: ninja, the compilers ninja puts in process groups of their own, a precompiled
header's compile. run.py is therefore the subreaper of what it starts (a process whose parent
died is re-parented to it, not to init, so it stays in run.py's tree); SIGTERM and SIGHUP stop
it as Ctrl-C does (KeyboardInterrupt: what was recorded is kept); and an interrupted run kills
every process still under it before it exits. Linux only (/proc, prctl); elsewhere a run
ends as before.

The pool's builds, held still while a timing runs, so that a run can judge while it builds.

A build is a worker process and what it starts: ninja, and the compilers ninja starts, each in
a process group of its own (ninja's doing), so a signal to the worker's group would miss them.
Holding stops every process of each build's tree (SIGSTOP, parents before children, so that none
starts another meanwhile; the tree is walked again until nothing new turns up) and letting go
continues them all (SIGCONT). A stopped compiler is stopped between two instructions: it resumes
where it was, and only its wall time grows (its limit is --build-timeout's, far above a timing).
While any slot times, a build that starts is stopped at once. Linux only (/proc); elsewhere,
and where /proc cannot be read, nothing is held and a run waits for its builds instead
(`can_hold`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from harness.run.flags import EXIT_INTERRUPTED

PROC = Path("/proc")
PR_SET_CHILD_SUBREAPER = 36  # from <sys/prctl.h>
END_S = 5.0  # how long an interrupted run keeps killing what is under it (a fork meanwhile)


def run_to_end(main: Callable[[], int]) -> int:
    """`main()`'s exit status, with SIGTERM and SIGHUP taken as Ctrl-C, and every process
    under this one killed where it was interrupted (KeyboardInterrupt, or status 130)."""
    for number in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, _interrupted)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1)
    code = EXIT_INTERRUPTED
    try:
        code = main()
    except KeyboardInterrupt:
        print("\ninterrupted: results recorded before the interrupt are kept", file=sys.stderr)
    finally:
        if code == EXIT_INTERRUPTED:
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


WALKS = 3  # walks of a tree after stopping what the last found: a process forked meanwhile


def can_hold() -> bool:
    """Whether this host lets a pool find and stop a build's processes."""
    return (PROC / str(os.getpid()) / "stat").exists()


class Held:
    """The build workers of a pool (by pid), and how many timings hold them now."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._builds: set[int] = set()
        self._holders = 0
        self._stopped: set[int] = set()  # every process stopped by the present hold

    def add(self, pid: int) -> None:
        """A build worker started: stopped at once when a timing holds the builds."""
        with self._lock:
            self._builds.add(pid)
            if self._holders:
                self._stopped |= _stop_trees([pid])

    def follow(self, process: subprocess.Popen[bytes]) -> None:
        """A process started for the builds (a precompiled header's compile): held as a build
        until it ends."""
        self.add(process.pid)

        def ended() -> None:
            process.wait()
            self.discard(process.pid)

        threading.Thread(target=ended, daemon=True).start()

    def discard(self, pid: int) -> None:
        """A build worker ended (its processes are killed with it)."""
        with self._lock:
            self._builds.discard(pid)

    def hold(self) -> None:
        """A timing begins: stop every build's processes (the first holder stops them)."""
        with self._lock:
            self._holders += 1
            if self._holders == 1:
                self._stopped |= _stop_trees(self._builds)

    def release(self) -> None:
        """A timing ended: the last holder continues every process the hold stopped."""
        with self._lock:
            self._holders = max(0, self._holders - 1)
            if self._holders:
                return
            for pid in self._stopped:
                _signal(pid, signal.SIGCONT)
            self._stopped = set()

    def close(self) -> None:
        """The run ends: continue whatever is stopped, whoever holds it."""
        with self._lock:
            self._holders = 1
        self.release()


def _stop_trees(roots: set[int] | list[int]) -> set[int]:
    """Stop each of `roots` and every process under them, parents first; the pids stopped.
    Each walk reads /proc once, for every tree at once."""
    stopped: set[int] = set()
    for _ in range(WALKS):
        under = children()
        found = [pid for root in roots for pid in tree(root, under)]
        found = [pid for pid in found if pid not in stopped]
        if not found:
            break
        for pid in found:
            if _signal(pid, signal.SIGSTOP):
                stopped.add(pid)
    return stopped


def _signal(pid: int, number: int) -> bool:
    """Send `number` to `pid`; False when it is gone (or not ours)."""
    try:
        os.kill(pid, number)
    except (ProcessLookupError, PermissionError):
        return False
    return True
