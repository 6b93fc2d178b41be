"""Describe the machine a run happens on, for the record and for the results folder's name."""

from __future__ import annotations

import datetime
import os
import platform
import re
import socket
import subprocess
from dataclasses import replace
from pathlib import Path

import torch

from harness.measure import hardware
from harness.record import Machine
from harness.run import processes
from harness.settings import Settings


def describe(device: torch.device, repo: Path) -> Machine:
    """GPU, driver, CUDA, torch, Python, host, commit and time: what a reader needs to trust."""
    info = Machine(
        device=str(device),
        torch=torch.__version__,
        cuda=torch.version.cuda,
        python=platform.python_version(),
        platform=platform.platform(),
        cpu=_cpu_model(),
        host=socket.gethostname(),
        commit=_commit(repo),
        time=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )
    if device.type != "cuda":
        return info
    props = torch.cuda.get_device_properties(device)
    return replace(
        info,
        gpu=props.name,
        capability=f"{props.major}.{props.minor}",
        sm_count=props.multi_processor_count,
        l2_bytes=props.L2_cache_size,
        memory_bytes=props.total_memory,
        driver=_driver_version(),
    )


def loaded(described: Machine, device: torch.device) -> Machine:
    """`described`, with how busy the machine is now, for the record of the solution about to
    run: the 1-minute load average, the host's CPU count and, on a GPU where NVML is available,
    how many processes other than this one and its workers hold a context on it. Each is None
    where it cannot be read."""
    try:
        load_1m: float | None = round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):  # not on every platform
        load_1m = None
    others = hardware.other_processes(device, _ours()) if device.type == "cuda" else None
    return replace(described, load_1m=load_1m, cpu_count=os.cpu_count(), gpu_processes=others)


def _ours() -> set[int]:
    """This process and its descendants (its workers, and what they started), by /proc."""
    return set(processes.tree(os.getpid(), processes.children()))


def results_folder(settings: Settings, info: Machine) -> Path:
    """The results folder of a run with `settings` on the machine `info` describes, under
    --results-dir: the machine's slug, with the profile's suffix (`-kernelbench`)."""
    return settings.places.results_dir / (slug(info) + settings.results_folder_suffix)


def slug(info: Machine) -> str:
    """Folder name for a machine's results: the GPU's name ('nvidia-h200'), or 'cpu'."""
    name = info.gpu or "cpu"
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def _output(*command: str) -> str | None:
    """What `command` prints, stripped; None where it is missing, fails or hangs."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def _driver_version() -> str | None:
    out = _output("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")
    return out.splitlines()[0] if out else None


def _commit(repo: Path) -> str | None:
    """$GIT_COMMIT if set, else the checkout's commit, marked '-dirty' when tracked files differ.

    $GIT_COMMIT comes first because a copy of the tree sent to another machine may carry a
    stale .git folder, or none.
    """
    if os.environ.get("GIT_COMMIT"):
        return os.environ["GIT_COMMIT"]
    sha = _output("git", "-C", str(repo), "rev-parse", "--short=12", "HEAD")
    if not sha:
        return None
    changes = _output("git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no")
    return f"{sha}-dirty" if changes else sha


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


WATCHED = ("harness", "solutions", "problems")  # what a table's numbers depend on


def older_commits(commits: set[str], repo: Path) -> tuple[str, list[str]] | None:
    """The checkout's last commit that changed WATCHED (short), and those of `commits` (as
    records name them, '-dirty' allowed) that do not contain it, or that this checkout does
    not know; None where git cannot tell (no git, no history) or none is older."""
    last = _output("git", "-C", str(repo), "log", "-1", "--format=%h", "--", *WATCHED)
    if not last:
        return None
    older = []
    for commit in sorted(commits):
        sha = commit.removesuffix("-dirty")
        done = subprocess.run(
            ["git", "-C", str(repo), "merge-base", "--is-ancestor", last, sha],
            capture_output=True,
            check=False,
        )
        if done.returncode != 0:  # 1: older; 128: not a commit of this checkout
            older.append(commit)
    return (last, older) if older else None
