"""The sandbox of the workers that build and judge solutions (`--sandbox`): what a worker may
reach (the run's `Policy`, the same for every worker, and the worker's own scratch folder: its
build, its copy of the solution, its log, its TMPDIR), and the launcher that closes the doors.

A sandboxed worker's interpreter is started through this file, run as a script:

    python harness/sandbox.py <the interpreter's own arguments>

which closes each door and then becomes that interpreter (exec), before any thread or any of
the worker's code exists:

1. a network namespace of its own, with nothing in it but a loopback that is down;
2. Landlock (harness/sandbox.py): everything readable except the policy's hidden paths;
   writable only the worker's scratch folder and /dev's nodes (the GPU's, /dev/null, /dev/shm);
   no TCP; no signal or ptrace to a process outside the sandbox;
3. limits: heap memory (RLIMIT_DATA), open files, and processes (RLIMIT_NPROC: the user's
   tasks now plus the policy's `processes`; for root, which the limit does not bind, every
   capability is dropped first, the bounding set too, so it binds and no exec brings them back);
   a process group of its own, which the harness kills whole when the job ends.

The policy and the scratch folder travel in the environment. Landlock only allows, so
"everything but these paths" is spelled as rules for each sibling on the way down to them
(`readable_roots`). As a script this imports nothing but the standard library.
harness.run.staging starts workers this way and stages their jobs; the audit hook below
names the rule an attempt met.

Landlock (Linux 5.13+) through its three system calls, for a process to restrict itself.

A ruleset names the kinds of access it handles; each rule then allows some of them beneath one
folder (or on one file); `restrict_self` applies it to the calling thread and the threads and
processes it starts later, for good, across exec. Everything a handled kind covers that no
rule allows is refused by the kernel (EACCES). A Landlock domain also keeps the process from
ptrace-ing, or from ABI 6 signalling, any process outside it (the harness, other workers).

Names what a sandboxed worker tried that the sandbox forbids: an audit hook (sys.addaudithook)
in the worker, and in every process it forks, writes one line per attempt to VIOLATIONS in its
scratch folder; the harness reads them when the job ends (harness.run.staging). The kernel
refuses the attempt either way; the hook only says which rule it met, even where the solution
swallows the error.

Rules: `network` (a connection, bind or send on an internet socket), `filesystem` (opening or
changing a path the worker may not reach: hidden, or outside its scratch folder for writing),
`ptrace` (ptrace or another process's memory), `processes` (half its process limit
started), `memory` (the heap limit reached: harness.run.staging reads that from the error).
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import socket
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # the launcher: the repository on the path, not harness/
    sys.path[0] = str(Path(__file__).resolve().parent.parent)


POLICY_VARIABLE = "HARNESS_SANDBOX_POLICY"  # the run's policy, JSON, for the launcher
SCRATCH_VARIABLE = "HARNESS_SANDBOX_SCRATCH"  # the worker's own folder, set per worker
OPEN_FILES = 8192


@dataclass(frozen=True)
class Policy:
    hidden: tuple[str, ...]  # nothing inside may be read or written (results, logs, builds...)
    shared: tuple[str, ...] = ()  # read-only, though inside a hidden folder (the shared headers)
    memory_bytes: int = 16 << 30  # RLIMIT_DATA: a worker's heap and anonymous memory
    processes: int = 1024  # tasks (processes, threads) a worker's user may add to its own
    net: bool = True  # a network namespace of its own (nothing to connect to)

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls, text: str) -> Policy:
        data = json.loads(text)
        return cls(**{**data, "hidden": tuple(data["hidden"]), "shared": tuple(data["shared"])})

    def is_hidden(self, real: str) -> bool:
        """Whether `real` (a resolved path) lies in a hidden folder and not in a shared one."""
        return within(real, self.hidden) and not within(real, self.shared)


def within(real: str, folders: tuple[str, ...]) -> bool:
    """Whether `real` (a resolved path) is one of `folders` or lies inside one."""
    return any(real == f or real.startswith(f.rstrip("/") + "/") for f in folders)


def listable_folders(hidden: tuple[str, ...]) -> list[Path]:
    """The folders above hidden paths: Python lists a folder to import from it, so these are
    listed (Landlock's READ_DIR holds beneath them too: the names in a hidden folder can be
    listed, never read)."""
    return sorted({parent for h in hidden for parent in Path(os.path.realpath(h)).parents})


def readable_roots(hidden: tuple[str, ...]) -> list[Path]:
    """Folders and files whose whole trees may be read: everything on the filesystem except
    `hidden` paths, as the fewest roots (the siblings of each folder on the way down to one)."""
    hide = {os.path.realpath(h) for h in hidden}
    above = {str(parent) for parent in listable_folders(hidden)}
    roots: list[Path] = []
    stack = ["/"]
    while stack:
        folder = stack.pop()
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            child = os.path.join(folder, name)
            real = os.path.realpath(child)
            if child in hide or real in hide or any(real.startswith(h + "/") for h in hide):
                continue  # hidden, or a link into a hidden folder
            if child in above and not os.path.islink(child):
                stack.append(child)
            elif real not in above:  # a link to a folder above a hidden one: walked as itself
                roots.append(Path(child))
    return roots


def hidden_paths(
    results: Path, logs: Path, builds: Path, solutions: list[Path], problems: list[Path]
) -> tuple[str, ...]:
    """What no worker may read: the run's results, logs and build cache (the workers' scratch
    folders are inside it), and the solutions (each worker gets a copy of its own). A
    solution's folder is hidden whole unless it holds what a worker needs (the repository,
    Python, a problem); then only its solution files are."""
    needed = [Path(__file__).resolve().parents[1], Path(sys.prefix).resolve()]
    needed += [problem.resolve() for problem in problems]
    hidden = {str(p.resolve()) for p in (results, logs, builds)}
    shipped = needed[0] / "solutions"
    if shipped.is_dir():
        hidden.add(str(shipped))
    for solution in solutions:
        folder = solution.resolve().parent
        if any(n == folder or n.is_relative_to(folder) for n in needed):
            hidden.add(str(solution.resolve()))
        else:
            hidden.add(str(folder))
    return tuple(sorted(hidden))


CLONE_NEWNET, CLONE_NEWUSER = 0x40000000, 0x10000000
PR_CAPBSET_DROP, CAP_LAST = 24, 63
CAP_VERSION_3 = 0x20080522


def unshare_network(libc: ctypes.CDLL) -> None:
    if libc.unshare(CLONE_NEWNET) == 0:
        return
    uid, gid = os.getuid(), os.getgid()  # no CAP_SYS_ADMIN: in a user namespace of its own
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET)")
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
    Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")


def restrict_files(policy: Policy, scratch: Path) -> None:
    version = abi()
    if not version:
        raise OSError("this kernel has no Landlock")
    rules = Ruleset(version)
    for root in readable_roots(policy.hidden):
        rules.allow(root, READ)
    for folder in listable_folders(policy.hidden):
        rules.allow(folder, READ_DIR)
    for shared in policy.shared:
        rules.allow(Path(shared), READ)
    rules.allow(scratch, READ | WRITE)
    # CUDA's start writes under /proc/<its pid> (without it cudaGetDeviceCount fails, error
    # 304: tuning/sandbox_cuda_probe.py, docs/anticheat.md); the pid is the worker's after exec
    rules.allow(Path(f"/proc/{os.getpid()}"), READ | WRITE)
    rules.allow(Path("/dev"), READ | DEVICE)
    rules.allow(Path("/dev/shm"), READ | WRITE)
    rules.apply()


def user_tasks(uid: int) -> int:
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry.name}/task"))
            except OSError:
                continue
    return count


def drop_capabilities(libc: ctypes.CDLL) -> None:
    for cap in range(CAP_LAST + 1):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # past the last one it fails: fine
    header = (ctypes.c_uint32 * 2)(CAP_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable; twice; all empty
    if libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def limit(policy: Policy, libc: ctypes.CDLL) -> None:
    tasks = user_tasks(os.getuid()) + policy.processes
    if os.getuid() == 0:
        drop_capabilities(libc)
    _lower(resource.RLIMIT_NPROC, tasks)
    _lower(resource.RLIMIT_DATA, policy.memory_bytes)
    _lower(resource.RLIMIT_NOFILE, OPEN_FILES)
    _lower(resource.RLIMIT_CORE, 0)


def _lower(kind: int, value: int) -> None:
    soft, hard = resource.getrlimit(kind)
    cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(kind, (min(cap, soft) if soft != resource.RLIM_INFINITY else cap, cap))


def main() -> None:
    policy = Policy.from_env(os.environ[POLICY_VARIABLE])
    scratch = Path(os.environ[SCRATCH_VARIABLE])
    for name in ("tmp", "cache"):
        (scratch / name).mkdir(parents=True, exist_ok=True)
    os.environ.update(
        TMPDIR=str(scratch / "tmp"),
        XDG_CACHE_HOME=str(scratch / "cache"),
        CUDA_CACHE_PATH=str(scratch / "cache" / "nv"),
        TRITON_CACHE_DIR=str(scratch / "cache" / "triton"),
        TORCHINDUCTOR_CACHE_DIR=str(scratch / "cache" / "inductor"),
        # Only this process may write under its /proc/<pid>, which CUDA's start needs (see
        # restrict_files), so CUDA never starts in a child: torch.compile must compile its
        # Triton kernels here, not in Inductor's pool of worker processes
        TORCHINDUCTOR_COMPILE_THREADS="1",
        HARNESS_PCH_READ_ONLY="1",
    )
    libc = ctypes.CDLL(None, use_errno=True)
    if policy.net:
        unshare_network(libc)
    restrict_files(policy, scratch)
    limit(policy, libc)
    os.setpgid(0, 0)  # a process group of its own (in the run's session), killed whole at the end
    os.execv(sys.executable, [sys.executable, *sys.argv[1:]])


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


if __name__ == "__main__":
    main()


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
            meant = _from_dir_fd(path, dir_fd)
            # os.makedirs(..., exist_ok=True) asks for folders that are there (Inductor's
            # os.mkdir(".") on a CPU): refused with EEXIST, it changes nothing
            if event == "os.mkdir" and os.path.lexists(meant):
                return None
            if not self.writable(os.path.realpath(meant)):
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
