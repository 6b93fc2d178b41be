"""Names what a sandboxed worker tried that the sandbox forbids: an audit hook (sys.addaudithook)
in the worker, and in every process it forks, writes one line per attempt to VIOLATIONS in its
scratch folder; the harness reads them when the job ends (harness.run.sandboxing). The kernel
refuses the attempt either way; the hook only says which rule it met, even where the solution
swallows the error.

Rules: `network` (a connection, bind or send on an internet socket), `filesystem` (opening or
changing a path the worker may not reach: hidden, or outside its scratch folder for writing),
`ptrace` (ptrace or another process's memory), `processes` (half its process limit
started), `memory` (the heap limit reached: harness.run.sandboxing reads that from the error).
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Any

from harness.sandbox import POLICY_VARIABLE, SCRATCH_VARIABLE, Policy, within

VIOLATIONS = "violations.txt"
RULES = ("network", "filesystem", "ptrace", "processes")  # each as `sandbox_<rule>`
FORKS = "forks.txt"
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
TRACING = {"ptrace", "process_vm_readv", "process_vm_writev"}
STARTS = {"os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "subprocess.Popen", "os.system"}
CHANGES = {"os.remove", "os.rename", "os.mkdir", "os.rmdir", "os.symlink", "os.link", "os.chmod"}
# Where a change's audit event holds the dir_fd its first path is relative to (shutil.rmtree,
# TemporaryDirectory's cleanup among them, removes by name within a folder's fd); a symlink's
# first path is its target, relative to nothing here
DIR_FD = {"os.remove": 1, "os.rmdir": 1, "os.mkdir": 2, "os.chmod": 2, "os.rename": 2, "os.link": 2}
ALWAYS_WRITABLE = ("/dev/", "/proc/self/")


def install() -> None:
    """In a worker started through the sandbox's launcher (its policy in the environment),
    start naming what it tries; elsewhere, nothing."""
    text, scratch = os.environ.get(POLICY_VARIABLE), os.environ.get(SCRATCH_VARIABLE)
    if text and scratch:
        sys.addaudithook(_Hook(Policy.from_env(text), Path(scratch)))


class _Hook:
    def __init__(self, policy: Policy, scratch: Path) -> None:
        self.policy = policy
        self.scratch = str(scratch.resolve())
        self.log = scratch / VIOLATIONS
        self.busy = False  # the hook's own writes raise events too

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if self.busy:
            return
        self.busy = True
        try:
            found = self.rule(event, args)
            if found:
                with open(self.log, "a", encoding="utf-8") as log:
                    log.write(f"{found[0]}\t{found[1]}\n")
        except Exception:  # never the solution's error: a hook that raises would be one
            pass
        finally:
            self.busy = False

    def rule(self, event: str, args: tuple[Any, ...]) -> tuple[str, str] | None:
        if event in ("socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg"):
            sock = args[0]
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                return "network", f"{event.split('.')[1]} to {args[1]!r}"
        elif event == "open" and isinstance(args[0], str | bytes | os.PathLike):
            return self.opened(os.fsdecode(args[0]), args[1], args[2])
        elif event in CHANGES and isinstance(args[0], str | bytes | os.PathLike):
            path = os.fsdecode(args[0])
            dir_fd = args[DIR_FD[event]] if event in DIR_FD else None
            if not self.writable(os.path.realpath(_from_dir_fd(path, dir_fd))):
                return "filesystem", f"{event} {path}"
        elif event == "ctypes.dlsym" and isinstance(args[1], str) and args[1] in TRACING:
            return "ptrace", f"called {args[1]} through ctypes"
        elif event in STARTS:
            with open(Path(self.scratch) / FORKS, "a", encoding="utf-8") as forks:
                forks.write("1\n")
                named = self.policy.processes // 2
                if forks.tell() >= 2 * named:  # from half the limit on
                    return "processes", f"started {named} processes (its limit: {named * 2})"
        return None

    def opened(self, path: str, mode: Any, flags: Any) -> tuple[str, str] | None:
        real = os.path.realpath(path)
        parts = real.split("/")
        other = parts[2] if len(parts) > 3 and parts[1:4:2] == ["proc", "mem"] else ""
        if other.isdigit() and int(other) != os.getpid():
            return "ptrace", f"opened {path}"
        if self.writable(real):
            return None
        if self.policy.is_hidden(real):
            return "filesystem", f"opened {path}, which the sandbox hides"
        writes = any(c in str(mode or "") for c in "wax+") or bool((flags or 0) & WRITE_FLAGS)
        if writes:  # not writable: the scratch folder and the device nodes returned above
            return "filesystem", f"opened {path} for writing, outside its scratch folder"
        return None

    def writable(self, real: str) -> bool:
        """Whether the worker may write `real` (a resolved path)."""
        own = (self.scratch, f"/proc/{os.getpid()}")
        return within(real, own) or real.startswith(ALWAYS_WRITABLE)


def _from_dir_fd(path: str, dir_fd: Any) -> str:
    """`path` as the call meant it: relative to the folder open as `dir_fd` where one is given."""
    if isinstance(dir_fd, int) and dir_fd >= 0 and not os.path.isabs(path):
        try:
            return os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
        except OSError:
            return path
    return path
