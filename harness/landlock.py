"""Landlock (Linux 5.13+) through its three system calls, for a process to restrict itself.

A ruleset names the kinds of access it handles; each rule then allows some of them beneath one
folder (or on one file); `restrict_self` applies it to the calling thread and the threads and
processes it starts later, for good, across exec. Everything a handled kind covers that no
rule allows is refused by the kernel (EACCES). A Landlock domain also keeps the process from
ptrace-ing, or from ABI 6 signalling, any process outside it (the harness, other workers).
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

CREATE_RULESET, ADD_RULE, RESTRICT_SELF = 444, 445, 446  # x86_64 and aarch64 alike
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38

# Filesystem access kinds (<linux/landlock.h>), with the ABI version that added each.
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15  # ABI 2, 3, 5
FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1}
FS_LATEST = (1 << 16) - 1  # ABI 5 and later
NET_TCP = 0b11  # bind and connect (ABI 4)
SCOPE_ALL = 0b11  # abstract UNIX sockets and signals (ABI 6)

READ = EXECUTE | READ_FILE | READ_DIR
WRITE = (
    (WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_DIR | MAKE_REG | MAKE_SOCK | MAKE_FIFO)
    | MAKE_SYM
    | REFER
    | TRUNCATE
)
DEVICE = READ_FILE | WRITE_FILE | IOCTL_DEV  # the GPU's nodes, /dev/null, /dev/shm's files
FILE_KINDS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # what a file rule may hold


class RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def abi() -> int:
    """The kernel's Landlock ABI version; 0 where it has none (or refuses it)."""
    version = _libc().syscall(CREATE_RULESET, None, ctypes.c_size_t(0), CREATE_RULESET_VERSION)
    return max(int(version), 0)


class Ruleset:
    """Rules being gathered; `apply` restricts the calling process with them."""

    def __init__(self, version: int) -> None:
        self.version = version
        self.fs = FS_BY_ABI.get(version, FS_LATEST)
        net, scoped = NET_TCP if version >= 4 else 0, SCOPE_ALL if version >= 6 else 0
        attr = RulesetAttr(self.fs, net, scoped)
        size = ctypes.sizeof(RulesetAttr) if version >= 6 else 16 if version >= 4 else 8
        self.libc = _libc()
        self.fd = self.libc.syscall(CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "landlock_create_ruleset")

    def allow(self, path: Path, access: int) -> bool:
        """Allow `access` beneath `path` (on it, for a file); False where it cannot be opened."""
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            if not os.path.isdir(path):
                access &= FILE_KINDS
            rule = PathBeneathAttr(access & self.fs, fd)
            done = self.libc.syscall(ADD_RULE, self.fd, RULE_PATH_BENEATH, ctypes.byref(rule), 0)
            return done == 0
        finally:
            os.close(fd)

    def apply(self) -> None:
        if self.libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        if self.libc.syscall(RESTRICT_SELF, self.fd, 0) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
        os.close(self.fd)
