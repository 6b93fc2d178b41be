"""What this machine allows a sandbox for solution workers (issue 26), one line each:

    python scripts/sandbox_probe.py

Landlock (its ABI version: filesystem rules from 1, TCP rules from 4, scoping from 6), a new
network namespace (`unshare -n`, and `unshare -rn` as an unprivileged user would), user
namespaces, writable cgroups (pids and memory, v1 or v2), whether RLIMIT_NPROC binds this user
(root ignores it), and the GPU's device nodes. Writes nothing; each check runs in a child.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from pathlib import Path

LANDLOCK_CREATE_RULESET = 444  # the syscall's number on x86_64 and aarch64
LANDLOCK_CREATE_RULESET_VERSION = 1


def landlock_abi() -> str:
    libc = ctypes.CDLL(None, use_errno=True)
    abi = libc.syscall(LANDLOCK_CREATE_RULESET, None, 0, LANDLOCK_CREATE_RULESET_VERSION)
    return f"ABI {abi}" if abi > 0 else f"unavailable ({os.strerror(ctypes.get_errno())})"


def works(*command: str) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"no ({err})"
    return "yes" if done.returncode == 0 else f"no ({done.stderr.strip() or done.returncode})"


def writable_cgroups() -> str:
    found = []
    for controller in ("pids", "memory", "unified"):
        folder = Path("/sys/fs/cgroup") / controller
        if folder.is_dir() and os.access(folder, os.W_OK):
            found.append(controller)
    root = Path("/sys/fs/cgroup/cgroup.controllers")
    if root.exists() and os.access(root.parent, os.W_OK):
        found.append(f"v2 ({root.read_text().strip()})")
    return ", ".join(found) or "none writable"


def main() -> None:
    print(f"kernel: {os.uname().release}; uid {os.getuid()}")
    print(f"landlock: {landlock_abi()}")
    print(f"network namespace (unshare -n): {works('unshare', '-n', 'true')}")
    print(f"user + network namespace (unshare -rn): {works('unshare', '-rn', 'true')}")
    print(f"cgroups: {writable_cgroups()}")
    nproc = "no: root ignores it" if os.getuid() == 0 else "yes"
    print(f"RLIMIT_NPROC binds this user: {nproc}")
    nodes = sorted(p.name for p in Path("/dev").glob("nvidia*"))
    print(f"GPU device nodes: {', '.join(nodes) or 'none'}")


if __name__ == "__main__":
    main()
