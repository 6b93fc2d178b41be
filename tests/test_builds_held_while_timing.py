"""harness.run.isolate: a timing stops every process of every running build, the compilers that
ninja puts in process groups of their own too, and continues them afterwards."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.run import processes

pytestmark = pytest.mark.skipif(not processes.can_hold(), reason="no /proc here")

# A build's shape: a worker, a child (ninja) and grandchildren (compilers) in their own groups.
TREE = """
import os, subprocess, sys, time
children = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             process_group=0) for _ in range(2)]
print(" ".join(str(c.pid) for c in children), flush=True)
time.sleep(60)
"""


def state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]


def until(pids: list[int], wanted: set[str]) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if all(state(pid) in wanted for pid in pids):
            return True
        time.sleep(0.05)
    return False


def build_tree() -> tuple[subprocess.Popen[str], list[int]]:
    """A worker whose child starts two grandchildren; all their pids."""
    worker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess, sys; subprocess.run([sys.executable, '-c', {TREE!r}])",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert worker.stdout is not None
    grandchildren = [int(pid) for pid in worker.stdout.readline().split()]
    child = [
        p
        for p in processes.tree(worker.pid, processes.children())
        if p not in (worker.pid, *grandchildren)
    ]
    return worker, [worker.pid, *child, *grandchildren]


def test_a_hold_stops_each_builds_whole_tree_until_the_last_timing_lets_go() -> None:
    held = processes.Held()
    worker, pids = build_tree()
    try:
        assert len(pids) == 4
        held.add(worker.pid)
        held.hold()
        held.hold()  # a second slot times at once
        assert until(pids, {"T", "t"}), [state(p) for p in pids]
        held.release()
        time.sleep(0.2)
        assert all(state(p) in "Tt" for p in pids)  # one slot still times
        held.release()
        assert until(pids, {"S", "R"}), [state(p) for p in pids]
        later, more = build_tree()  # a build that starts during a timing is stopped at once
        try:
            held.hold()
            held.add(later.pid)
            assert until(more, {"T", "t"})
            held.discard(later.pid)
            held.close()  # the run ends: nothing stays stopped
            assert until(more + pids, {"S", "R"})
        finally:
            for pid in more:
                os.kill(pid, 9)
            later.wait()
    finally:
        for pid in pids:
            os.kill(pid, 9)
        worker.wait()
