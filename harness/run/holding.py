"""The pool's builds, held still while a timing runs, so that a run can judge while it builds.

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

import os
import signal
import subprocess
import threading
from pathlib import Path

from harness.run import ending

PROC = Path("/proc")
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
        children = ending.children()
        found = [pid for root in roots for pid in ending.tree(root, children)]
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
