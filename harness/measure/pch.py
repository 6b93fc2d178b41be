"""PyTorch's extension header, precompiled, for the C++ half of extension builds.

`load_inline`'s main.cpp begins with `#include <torch/extension.h>`, which GCC can load
precompiled (a .gch file made the same way). The headers are kept in the build cache,
`.pch/<key>/torch/extension.h.gch`: one per compiler, options but include folders and
preprocessed text (`_key`: flag sets that compile the header the same share it, the
extension's name left out), that folder first on each build's include path. Making a header
costs about what two compiles save with it (docs/problems.md): a flag set's first PAYS_AFTER
compiles go without, and the next makes it, as a step of the build's ninja file (this file,
run as a script: once, whichever builds ask at once), beside nvcc and before main.cpp. A
build whose objects are up to date gets the same commands and no step. In the sandbox a build
never makes it (it could carry a solution's code into others' builds): it asks the harness
(`ask`, `answer`), which makes it only with its own compiler and flags that read nothing but
PyTorch's, CUDA's, Python's and the system's headers. GCC only; HARNESS_PCH=0 turns it off,
HARNESS_PCH_DIR keeps the headers in a folder of its own (the tests share one).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

HEADER = "torch/extension.h"
READ_ONLY = "HARNESS_PCH_READ_ONLY"  # set in the sandbox (harness/sandbox.py)
NAME_FLAG = re.compile(r"^-DTORCH_EXTENSION_NAME=")
COMPILE = re.compile(r"^build (\S+\.o): compile (\S+)$", re.MULTILINE)
ASKED, TAKEN, REFUSED = "pch-asked.json", "pch-taken.json", "pch-refused.txt"  # in a scratch
PAYS_AFTER = 2  # compiles of a flag set without its header, before one makes it
KEYS = ".keys"  # under the headers' folder: each build's flags, mapped to its header's key
TAKE_S = 10.0  # how long a sandboxed build waits for the harness to take its request
WAIT_S = 300.0  # and then for the header
# The flags a header may be made with for a sandboxed build, besides its include folders:
# macros, and options of optimization, language, warnings and target, none that names a file.
SAFE_FLAG = re.compile(
    r"-(D[A-Za-z_]\w*(=[\w.+-]*)?|U[A-Za-z_]\w*|O[0-3sgz]?|std=[\w+]+|g[0-3]?|w|pthread"
    r"|f[A-Za-z][\w+-]*(=[\w.+-]+)?|W[a-z][\w+-]*(=\w+)?|m[a-z][\w+-]*(=[\w.+-]+)?)"
)
UNSAFE_F = ("-fplugin", "-fdump", "-fprofile", "-fauto-profile", "-fopt-info", "-fcallgraph")
PR_SET_PDEATHSIG = 1  # from <sys/prctl.h>
_STARTED: set[str] = set()  # the headers this process has started making for sandboxed builds


def install(cache_root: Path) -> None:
    """Have torch's extension builder use precompiled headers kept under `cache_root`, unless
    the environment says HARNESS_PCH=0 (each header takes about 0.8 GB of disk) or names a
    folder of its own for them in HARNESS_PCH_DIR."""
    if os.environ.get("HARNESS_PCH") == "0":
        return
    from torch.utils import cpp_extension

    run_ninja = getattr(cpp_extension, "_run_ninja_build", None)
    if run_ninja is None or getattr(run_ninja, "precompiles", False):
        return

    root = folder_of(cache_root)

    def with_header(build_directory: str, *args: Any, **kwargs: Any) -> Any:
        try:
            prepare(Path(build_directory), root)
        except Exception as err:  # the build runs as torch wrote it
            print(f"precompiled header: not used ({type(err).__name__}: {err})", flush=True)
        return run_ninja(build_directory, *args, **kwargs)

    with_header.precompiles = True  # type: ignore[attr-defined]
    cpp_extension._run_ninja_build = with_header


def folder_of(cache_root: Path) -> Path:
    """Where the headers of builds cached under `cache_root` are kept."""
    return Path(os.environ.get("HARNESS_PCH_DIR") or cache_root / ".pch")


def prepare(build: Path, root: Path) -> Path | None:
    """Point the C++ compiles of `build`'s ninja file at the precompiled header, with a step
    that makes it where a compile is due; the header's path, or None where none applies."""
    ninja = build / "build.ninja"
    text = ninja.read_text()
    values = dict(re.findall(r"^(cxx|cflags|post_cflags) = ?(.*)$", text, re.MULTILINE))
    compiles = COMPILE.findall(text)
    if "cxx" not in values or not any(_header_first(Path(source)) for _, source in compiles):
        return None
    cxx, cflags = values["cxx"], values["cflags"]
    ours = f"-I{root}"  # this module's own flag, where the ninja file already has it
    flags = [f for f in shlex.split(cflags) if not NAME_FLAG.match(f) and not f.startswith(ours)]
    flags += shlex.split(values.get("post_cflags", ""))
    header, version = _header(flags), _gcc_version(cxx)
    if header is None or version is None:
        return None
    folder = root / _key(cxx, version, flags, header, root)
    gch = folder / f"{HEADER}.gch"
    boxed = os.environ.get(READ_ONLY) == "1"
    if boxed:  # in the sandbox: never made or counted here (a write is a rejection), asked for
        if not gch.is_file() and _compile_due(build, compiles):
            ask(cxx, flags, header, gch)  # made, not yet, or refused: the folder says which
        beside = folder / HEADER  # the harness's, for a header it will make now or later
        if not (beside.is_symlink() and beside.resolve() == header.resolve()):
            return None
    else:
        _mirror(header, folder / HEADER)
    include = shlex.quote(f"-I{folder}")
    if include not in cflags.split():  # always: the commands stay the same, built or not
        text = re.sub(r"^cflags = ", lambda _: f"cflags = {include} ", text, count=1, flags=re.M)
    if not boxed and not gch.exists() and _compile_due(build, compiles) and _pays(folder):
        text = _with_step(text, gch, [*shlex.split(cxx), "-x", "c++-header", str(header), *flags])
    ninja.write_text(text)
    return gch


def ask(cxx: str, flags: list[str], header: Path, gch: Path) -> bool:
    """In the sandbox: ask the harness to make `gch` (a request in the worker's scratch folder,
    which the harness reads as it watches the worker, `answer`), and wait for it; whether it
    is there. One answered "not yet" compiles with the harness's include folder for it, from
    the header itself; one not taken or refused, as torch wrote it."""
    from harness.sandbox import SCRATCH_VARIABLE  # here: this file also runs as a script

    scratch = os.environ.get(SCRATCH_VARIABLE)
    if not scratch:
        return False
    request, failed = Path(scratch) / ASKED, gch.with_name(f"{gch.name}.failed")
    partial = request.with_name(f"{ASKED}.part")
    partial.write_text(json.dumps({"cxx": cxx, "flags": flags, "header": str(header)}))
    os.replace(partial, request)
    print("precompiled header: asked the harness to make it", flush=True)
    started = time.monotonic()
    while not gch.is_file():
        waited = time.monotonic() - started
        refused = Path(scratch) / REFUSED
        if refused.exists():
            print(f"precompiled header: not made: {refused.read_text()}", flush=True)
            return False
        if failed.exists() or waited > WAIT_S or (request.exists() and waited > TAKE_S):
            print("precompiled header: not made, main.cpp compiles without it", flush=True)
            return False
        time.sleep(0.1)
    return True


def answer(
    scratch: Path, cache_root: Path, trusted: list[Path] | None = None
) -> subprocess.Popen[bytes] | None:
    """Outside the sandbox, as the harness watches a worker: make the header its build asked
    for (`ask`), in a process of its own (returned, when this call started it), or say in its
    scratch folder why not. `trusted`: the folders its include flags may name (PyTorch's,
    CUDA's, Python's and the system's)."""
    request = scratch / ASKED
    if not request.exists():
        return None
    try:
        os.replace(request, scratch / TAKEN)
        asked = json.loads((scratch / TAKEN).read_text())
        made = _command(asked, folder_of(cache_root), trusted or _trusted_folders())
    except (OSError, ValueError, TypeError, KeyError) as err:
        made = f"{type(err).__name__}: {err}"
    if isinstance(made, str):
        (scratch / REFUSED).write_text(made)
        return None
    gch, command = made
    _mirror(Path(asked["header"]), gch.parent.parent / HEADER)  # <key>/torch/extension.h
    if str(gch) in _STARTED or gch.is_file():
        return None
    if not _pays(gch.parent.parent):  # its include folder stands: the commands stay the same
        (scratch / REFUSED).write_text(f"not yet (a flag set's first {PAYS_AFTER} go without)")
        return None
    _STARTED.add(str(gch))
    child = subprocess.Popen(  # it dies with this process (`make`): no compile outlives a run
        [sys.executable, __file__, str(gch), *command],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    threading.Thread(target=child.wait, daemon=True).start()
    return child


def _command(asked: dict, root: Path, trusted: list[Path]) -> tuple[Path, list[str]] | str:
    """The header and the command that makes it for a sandboxed build's request, or why the
    harness will not: a compiler not its own, or a flag that could read a file of the
    solution's (an include folder outside `trusted`, a plugin, a file of options)."""
    cxx, flags, header = str(asked["cxx"]), [str(f) for f in asked["flags"]], asked["header"]
    if cxx != os.environ.get("CXX", "c++"):
        return f"its compiler {cxx!r} is not the harness's"
    for flag, folder in _words(flags):
        if folder is not None:
            if not folder or not _inside(Path(folder), trusted):
                return f"its include folder {folder} is not PyTorch's, CUDA's, Python's or /usr's"
        elif flag.startswith(UNSAFE_F) or not SAFE_FLAG.fullmatch(flag):
            return f"its flag {flag!r} is not one a shared header is made with"
    found, version = _header(flags), _gcc_version(cxx)
    if found is None or str(found) != header or not _inside(found, trusted) or version is None:
        return "its torch/extension.h is not PyTorch's, or its compiler is not GCC"
    gch = root / _key(cxx, version, flags, found, root) / f"{HEADER}.gch"
    return gch, [*shlex.split(cxx), "-x", "c++-header", str(found), *flags]


def _inside(path: Path, folders: list[Path]) -> bool:
    resolved = path.resolve()
    return any(resolved.is_relative_to(folder) for folder in folders)


def _trusted_folders() -> list[Path]:
    """PyTorch's, Python's, the system's and the CUDA toolkit's folders, as the harness finds
    the toolkit (harness.toolchain): torch's own guess, made as its extension builder is
    imported, takes /usr/local for a wrapper `nvcc` in /usr/local/bin, and warns about it."""
    import torch

    from harness import toolchain  # here: this file also runs as a script

    found = [Path(torch.__file__).parent, Path("/usr/include"), Path("/usr/local/include")]
    found += [Path(sysconfig.get_paths()[name]) for name in ("include", "platinclude")]
    cuda = toolchain.find_cuda_home()
    return [folder.resolve() for folder in [*found, *([Path(cuda)] if cuda else [])]]


def _mirror(header: Path, beside: Path) -> None:
    """The header itself beside its .gch (a link): GCC, having found the .gch in a folder,
    takes the header from that folder where it cannot use the .gch (not made yet, or an
    #include of it after the first line of code, as in a main.cpp whose own source includes
    torch/extension.h again), and PyTorch's headers are included once by content."""
    if beside.is_symlink() and beside.resolve() == header.resolve():
        return
    beside.parent.mkdir(parents=True, exist_ok=True)
    link = beside.with_name(f"{beside.name}.{os.getpid()}")
    link.unlink(missing_ok=True)
    link.symlink_to(header)
    os.replace(link, beside)


def _with_step(text: str, gch: Path, command: list[str]) -> str:
    """`text` with a step making `gch` by `command`, which each C++ compile waits for."""
    line = " ".join(shlex.quote(word) for word in [sys.executable, __file__, str(gch), *command])
    target = str(gch).replace("$", "$$").replace(" ", "$ ").replace(":", "$:")  # as ninja reads it
    step = (
        f"rule harness_pch\n  command = {line.replace('$', '$$')}\n\nbuild {target}: harness_pch\n"
    )
    waits = COMPILE.sub(lambda m: f"{m.group(0)} || {target}", text)
    return waits.replace("\nrule compile\n", f"\n{step}\nrule compile\n", 1)


def _header_first(source: Path) -> bool:
    try:
        with open(source, encoding="utf-8") as handle:
            return handle.readline().strip() == f"#include <{HEADER}>"
    except OSError:
        return False


def _header(flags: list[str]) -> Path | None:
    """torch/extension.h where the build's include flags find it."""
    for _, folder in _words(flags):
        if folder and (Path(folder) / HEADER).is_file():
            return Path(folder) / HEADER
    return None


def _words(flags: list[str]) -> Iterator[tuple[str, str | None]]:
    """Each flag (`-isystem` with the word after it taken as its folder), with the include
    folder it names, or None where it names none."""
    words = iter(flags)
    for flag in words:
        if flag == "-isystem":
            yield flag, next(words, "")
        else:
            yield flag, flag[2:] if flag.startswith("-I") else None


@cache
def _gcc_version(cxx: str) -> str | None:
    """The compiler's version line, when it is GCC (whose .gch files this module makes)."""
    try:
        out = subprocess.run([*shlex.split(cxx), "--version"], capture_output=True, text=True)
    except OSError:
        return None
    return out.stdout.splitlines()[0] if "Free Software Foundation" in out.stdout else None


def _key(cxx: str, version: str, flags: list[str], header: Path, root: Path) -> str:
    """The folder name of the header `flags` get: the same for flag sets that compile it the
    same (the compiler, the options but include folders, and the preprocessed text: an include
    folder the header reads nothing from changes none). Kept in `root`/KEYS by the build's own
    flags, so the header is preprocessed (a second) once per flag set."""
    stat = header.stat()
    full = _digest([cxx, version, *flags, str(header), str(stat.st_size), str(stat.st_mtime_ns)])
    known = root / KEYS / full
    with contextlib.suppress(OSError):
        return known.read_text()
    command = [*shlex.split(cxx), "-x", "c++-header", "-E", str(header), *flags]
    text = subprocess.run(command, capture_output=True)
    if text.returncode != 0:
        return full
    options = [flag for flag, folder in _words(flags) if folder is None]
    key = _digest([cxx, version, *options, hashlib.sha256(text.stdout).hexdigest()])
    if os.environ.get(READ_ONLY) == "1":  # in the sandbox: worked out each time, never kept
        return key
    with contextlib.suppress(OSError):
        known.parent.mkdir(parents=True, exist_ok=True)
        partial = known.with_name(f"{full}.{os.getpid()}")
        partial.write_text(key)
        os.replace(partial, known)
    return key


def _digest(parts: list[str]) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _pays(folder: Path) -> bool:
    """Count one more compile with `folder`'s header; whether making it pays now: after the
    first PAYS_AFTER compiles, which go without it."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "compiles", "a+") as counted:
        fcntl.flock(counted, fcntl.LOCK_EX)
        counted.write("1\n")
        counted.flush()
        counted.seek(0)
        return len(counted.read().splitlines()) > PAYS_AFTER


def _compile_due(build: Path, compiles: list[tuple[str, str]]) -> bool:
    """Whether ninja will compile a C++ object: one is missing or older than its source."""
    for target, source in compiles:
        try:
            if (build / target).stat().st_mtime_ns < Path(source).stat().st_mtime_ns:
                return True
        except OSError:
            return True
    return False


def make(gch: Path, command: list[str]) -> None:
    """The header step: compile to `gch` by `command` (which lacks `-o`), once, whichever
    builds run it at once; a failure is noted beside it, and not tried again. The compiler
    runs in a process group of its own, killed whole where this step is stopped (a signal, or
    its parent's death: `_die_with_parent`), and a partial header is never left behind."""
    gch.parent.mkdir(parents=True, exist_ok=True)
    failed = gch.with_name(f"{gch.name}.failed")
    with open(gch.parent / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if gch.exists() or failed.exists():
            return
        for stale in gch.parent.glob(f"{gch.name}.[0-9]*"):  # of a step killed outright
            stale.unlink(missing_ok=True)
        partial = gch.with_name(f"{gch.name}.{os.getpid()}")
        started = time.monotonic()
        compiler = subprocess.Popen(
            [*command, "-o", str(partial)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            errors = compiler.communicate()[1]
        finally:
            if compiler.poll() is None:
                os.killpg(compiler.pid, signal.SIGKILL)
                compiler.wait()
            if compiler.returncode != 0:
                partial.unlink(missing_ok=True)
        if compiler.returncode != 0:
            failed.write_text(errors)
            print(f"precompiled header: not built, see {failed}", flush=True)
            return
        os.replace(partial, gch)
        print(f"precompiled header: {gch} built in {time.monotonic() - started:.0f} s", flush=True)


def _die_with_parent() -> None:
    """On Linux, a SIGTERM to this process when its parent dies (ninja, or the harness that
    started it), which `make` turns into its compiler's end; SIGTERM and SIGHUP end it as
    Ctrl-C does."""
    for number in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.default_int_handler)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


if __name__ == "__main__":  # the header step of a build.ninja (`_with_step`), or `answer`'s
    _die_with_parent()
    try:
        make(Path(sys.argv[1]), sys.argv[2:])
    except KeyboardInterrupt:
        sys.exit(130)
