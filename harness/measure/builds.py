"""Watch the extension builds a solution makes, inside the worker.

Solutions call torch's `load_inline` or `load` themselves, usually at import. The watcher wraps
both so the harness knows which extensions were built, whether they hold CUDA code, how long
each took, whether it was only loaded from the build cache (its module file was there before and
was left untouched), and whether a failure happened inside a build (a compile error) or
elsewhere.

Point a compiler error in a generated source file back at the solution's own .py.

load_inline writes the source strings of a solution into `main.cpp` and `cuda.cu` of its build
folder, with lines of its own added (includes, bindings), and the compiler's errors name those
files. The line the compiler names is looked up, by its text, in the solution's .py file; where
the text occurs more than once, the lines around it decide, and where they cannot, nothing is
said rather than a wrong line.

A lighter PyTorch header for a build's CUDA units, with the source as written to fall back on.

LLM-written CUDA sources almost always `#include <torch/extension.h>`: all of PyTorch's C++
frontend and pybind11, which nvcc parses twice (device and host) and which takes most of a
build's minute. Their CUDA code needs `<torch/types.h>` (ATen, the tensor factories, the
`torch::` names), which `<torch/extension.h>` includes itself, through `<torch/all.h>`; and of
ATen's 2,000-odd operators only those it names.

So each CUDA unit that `load_inline` wrote into its build folder and that includes
`<torch/extension.h>` compiles from a copy beside it, `<stem>.light.cu`, where that include
reads the lightest of two headers it compiles with, and nothing else differs (a `#line`
directive keeps the compiler's file names and line numbers those of the unit as written):
first OPS, `<stem>.light.h`, made from the installed `<torch/types.h>` with ATen's operators
declared one header each for the names the unit uses (`_ops_header`, where it can say that
every function the unit can name is declared as in the full header); then `<torch/types.h>`
itself (LIGHT). A unit that uses what a lighter header lacks (pybind11, `torch::nn`) fails to
compile with it; the build then tries the next, down to the unit as written, and remembers
each failure beside the unit (`<stem>.cu.ops-failed`, `<stem>.cu.as-written`, holding the
unit's digest), so a later load of the same source neither tries again nor rebuilds. The one
way the two could compile differently is an overload declared only in the full header that
C++ would prefer for a call: the light copy would call the other one (docs/problems.md). The
worker's log says which unit compiled from what, and each build's record holds it
(`Build.cuda_header`).

HARNESS_LIGHT_HEADER=0 compiles every unit as written; HARNESS_LIGHT_HEADER=types tries
<torch/types.h> alone.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import itertools
import os
import re
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.job import BuildEnd, BuildStart
from harness.measure import pch
from harness.record import Build

Notify = Callable[[BuildStart | BuildEnd], None]


class NoCudaToolchain(RuntimeError):
    """A CUDA build was asked for where torch has no CUDA or no toolkit was found."""


class BuildWatcher:
    """Wraps torch.utils.cpp_extension.load_inline and load for the life of the process."""

    def __init__(
        self,
        notify: Notify,
        cuda_toolchain: str | None,
        log: Path | None = None,
        cache: Path | None = None,
    ) -> None:
        self.notify = notify
        self.cache = cache  # the build cache, where precompiled headers are kept (pch.py)
        self.cuda_toolchain = cuda_toolchain  # None, or why CUDA cannot be built here
        self.log = log  # where the compiler's output goes (the worker's stdout)
        self.builds: list[Build] = []
        self.current: Build | None = None
        self.log_offset = 0  # where the current build's output starts in the log
        self.triton: Any = None  # the solution's Triton kernels' (harness.measure.triton_builds)

    @property
    def uses_cuda(self) -> bool:
        return any(b.cuda for b in self.builds) or bool(self.current and self.current.cuda)

    @property
    def seconds(self) -> float:
        return sum(b.seconds or 0.0 for b in self.builds)

    def install(self) -> None:
        from torch.utils import cpp_extension

        for name in ("load_inline", "load"):
            setattr(cpp_extension, name, self._wrap(getattr(cpp_extension, name), name))
        install()  # before the precompiled header's wrapper, which runs around it
        if self.cache is not None:
            pch.install(self.cache)

    def _wrap(self, original: Callable[..., Any], kind: str) -> Callable[..., Any]:
        signature = inspect.signature(original)

        def build(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.arguments["verbose"] = True  # the compiler's own output goes to the log
            current = Build(str(bound.arguments.get("name")), _uses_cuda(kind, bound.arguments))
            self.current = current  # until it ends: the build under way
            if current.cuda and self.cuda_toolchain:
                raise NoCudaToolchain(self.cuda_toolchain)
            modules = _modules(bound.arguments)
            # `found`: a module built before lies in its folder, so this is likely only a load
            self.notify(BuildStart(current.name, current.cuda, found=bool(modules)))
            self.log_offset = self.log.stat().st_size if self.log and self.log.exists() else 0
            start = time.perf_counter()
            take()  # what an earlier, failed build left in the tally
            result = original(*bound.args, **bound.kwargs)
            seconds = time.perf_counter() - start
            cached = bool(modules) and _modules(bound.arguments) == modules
            header = take()
            current = replace(
                current,
                seconds=seconds,
                cached=cached,
                cuda_header=header,
                # the light header was not tried
                hint=None if cached or header else slow_header(kind, bound.arguments),
            )
            self.builds.append(current)
            self.current = None
            self.notify(BuildEnd(current.name, seconds, cached, current.hint))
            return result

        build.__doc__ = original.__doc__
        return build

    def failure(self, err: BaseException, solution: Path | None = None) -> str:
        """One line for a failed build: the compiler's first error, without its build path,
        and the line of `solution` it points into, where that can be found (sourcemap)."""
        text = ""
        if self.log and self.log.exists():
            with open(self.log, "rb") as handle:
                handle.seek(self.log_offset)
                text = first_error_text(handle.read().decode(errors="replace"))
        return _short(annotate(_first_error(f"{text}\n{err}"), solution))


FAILED_BUILD = "compile_error.txt"  # in a build folder: the compile error its content gave


def remember_failure(folder: Path, detail: str) -> None:
    """Keep a build's compile error in its folder, whose name is the hash of the solution's
    content and toolchain (harness.toolchain.build_folder): the same content fails the same way,
    so a later run answers from it without compiling (`remembered_failure`). A compile killed
    from outside (a signal, out of memory, a full disk) says nothing of the code: not kept."""
    if "error" not in detail.lower() or re.search(r"killed|signal|no space left", detail, re.I):
        return
    written = folder / f".{FAILED_BUILD}.{os.getpid()}"
    written.write_text(detail + "\n")
    written.replace(folder / FAILED_BUILD)


def remembered_failure(folder: Path) -> str | None:
    """The compile error an earlier build of this folder's content gave, with where it is kept
    (delete it to build again), or None."""
    kept = folder / FAILED_BUILD
    if not kept.is_file():
        return None
    detail = kept.read_text().strip()
    return f"{detail} (remembered from an earlier build of the same code: delete {kept} to retry)"


def _modules(arguments: Mapping[str, object]) -> dict[Path, int]:
    """The built modules in an extension's build folder, with their times of change: the same
    before and after a build when it only loaded them from the cache."""
    folder = str(arguments.get("build_directory") or "")
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if not folder and root:
        folder = os.path.join(root, str(arguments.get("name")))
    if not folder or not os.path.isdir(folder):
        return {}
    return {p: p.stat().st_mtime_ns for p in Path(folder).glob("*.so")}


def _uses_cuda(kind: str, arguments: Mapping[str, object]) -> bool:
    if arguments.get("with_cuda"):
        return True
    if kind == "load_inline":
        return bool(arguments.get("cuda_sources"))
    return bool(_cuda_files(arguments))


def _cuda_files(arguments: Mapping[str, object]) -> list[Path]:
    """The CUDA files among `load`'s sources (a path, or a list of them)."""
    paths = [Path(source) for source in _strings(arguments.get("sources"))]
    return [path for path in paths if str(path).endswith((".cu", ".cuh"))]


_EXTENSION_H = re.compile(rf"#\s*include\s*[<\"]{re.escape(pch.HEADER)}[>\"]")
SLOW_HEADER = (
    "its CUDA source includes <torch/extension.h>; <torch/types.h> is enough there and nvcc "
    "takes well under half the time (docs/problems.md)"
)


def slow_header(kind: str, arguments: Mapping[str, object]) -> str | None:
    """SLOW_HEADER where the build's CUDA sources include <torch/extension.h>, else None."""
    if kind == "load_inline":
        texts = _strings(arguments.get("cuda_sources"))
    else:
        texts = [_text(path) for path in _cuda_files(arguments)]
    return SLOW_HEADER if any(_EXTENSION_H.search(text) for text in texts) else None


def _strings(value: object) -> list[str]:
    """A build argument that takes a string or a list of them (sources, paths), as a list."""
    if isinstance(value, str | os.PathLike):
        return [str(os.fspath(value))]
    return [str(os.fspath(item)) for item in value] if isinstance(value, list | tuple) else []


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


_ERROR_LINE = re.compile(r"\berror\b|undefined reference|undefined symbol", re.IGNORECASE)
_NOT_THE_CAUSE = ("FAILED:", "ninja:", "Error building", "subprocess.CalledProcessError")


def _first_error(text: str) -> str:
    """The first line of `text` that names an error, else its first line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return next(
        (ln for ln in lines if _ERROR_LINE.search(ln) and not ln.startswith(_NOT_THE_CAUSE)),
        lines[0] if lines else "build failed",
    )


def _short(line: str) -> str:
    return re.sub(r"^/\S*/", "", line)  # '/long/build/dir/main.cpp:3:5: error' -> 'main.cpp:...'


# 'path/main.cpp:12:5: error: ...' (gcc, clang) and 'path/cuda.cu(12): error: ...' (nvcc).
_LOCATION = re.compile(
    r"^(?P<path>\S+?\.(?:cpp|cu|cuh|cc|cxx|h|hpp))(?::(?P<gcc>\d+)(?::\d+)?|\((?P<nvcc>\d+)\))"
)
CONTEXT = 6  # lines on each side compared when the failing line's text occurs more than once


def annotate(error: str, solution: Path | None) -> str:
    """`error` (a compiler's line, its path whole) with the solution's line added after its
    location, e.g. 'main.cpp:4:41 (solution.py line 8): error: ...', where it can be found."""
    found = _LOCATION.match(error)
    if found is None or solution is None:
        return error
    generated = Path(found["path"])
    line = int(found["gcc"] or found["nvcc"])
    where = solution_line(generated, line, solution)
    if where is None:
        return error
    end = found.end()
    return f"{error[:end]} ({solution.name} line {where}){error[end:]}"


def solution_line(generated: Path, line: int, solution: Path) -> int | None:
    """The line (from 1) of `solution` holding line `line` of the `generated` file, or None."""
    try:
        produced = generated.read_text(errors="replace").splitlines()
        written = solution.read_text(errors="replace").splitlines()
    except OSError:
        return None
    if not 1 <= line <= len(produced) or not produced[line - 1].strip():
        return None
    target = produced[line - 1].strip()
    candidates = [i for i, text in enumerate(written) if text.strip() == target]
    if len(candidates) > 1:
        scores = {i: _agreement(produced, line - 1, written, i) for i in candidates}
        best = max(scores.values())
        candidates = [i for i in candidates if scores[i] == best]
    return candidates[0] + 1 if len(candidates) == 1 else None


def _agreement(produced: list[str], at: int, written: list[str], to: int) -> int:
    """How many of the lines around `at` in `produced` are those around `to` in `written`."""
    same = 0
    for step in range(1, CONTEXT + 1):
        for offset in (-step, step):
            a, b = at + offset, to + offset
            if 0 <= a < len(produced) and 0 <= b < len(written):
                same += produced[a].strip() == written[b].strip()
    return same


FULL, LIGHT = "torch/extension.h", "torch/types.h"
OPS = "ATen operator headers"  # Build.cuda_header of a unit compiled against `_ops_header`
AS_WRITTEN = "as written"  # Build.cuda_header of a unit that fell back
INCLUDE = re.compile(rf"^([ \t]*#[ \t]*include[ \t]*)[<\"]{re.escape(FULL)}[>\"]", re.MULTILINE)
CUDA_COMPILE = re.compile(r"^(build \S+\.o: cuda_compile )(\S+)$", re.MULTILINE)
SWITCH = "HARNESS_LIGHT_HEADER"
FALLBACK = "light header: the light copy did not compile"  # the log's line before the next try
_FAILED = object()  # the light compile's outcome where ninja failed
_used: list[str] = []  # what each CUDA unit compiled against, since the last `take`


def install() -> None:
    """Have torch's extension builder compile CUDA units against the light header where they
    compile with it. Installed before the precompiled header's wrapper (pch.install), which
    then runs around this one."""
    if os.environ.get(SWITCH) == "0":
        return
    from torch.utils import cpp_extension

    run_ninja = getattr(cpp_extension, "_run_ninja_build", None)
    if run_ninja is None or any(getattr(run_ninja, a, False) for a in ("lightens", "precompiles")):
        return  # installed already (inside the precompiled header's wrapper, where that is)
    cpp_extension._run_ninja_build = wrap(run_ninja)


def wrap(run_ninja: Callable[..., Any]) -> Callable[..., Any]:
    """`run_ninja` (torch's `_run_ninja_build`), compiling each light unit against the lightest
    header it compiles with: OPS, then LIGHT, then as written."""

    def lightened(build_directory: str, *args: Any, **kwargs: Any) -> Any:
        build = Path(build_directory)
        ninja = build / "build.ninja"
        written = ninja.read_text()
        units = [Path(source) for _, source in CUDA_COMPILE.findall(written)]
        tried = [unit for unit in units if _lightens(unit, build)]
        headers = (LIGHT,) if os.environ.get(SWITCH) == "types" else (OPS, LIGHT)
        failed = False
        while light := _lightest(tried, headers, written):
            ninja.write_text(_pointed(written, {unit: copy for unit, (copy, _) in light.items()}))
            for unit, (copy, header) in light.items():
                said = f"{unit.name} compiles as {copy.name} ({FULL} read as {header})"
                print(f"light header: {said}", flush=True)
            try:
                result = run_ninja(build_directory, *args, **kwargs)
            except (RuntimeError, subprocess.CalledProcessError):
                result = _FAILED
            if result is not _FAILED:
                _used.extend(header for _, header in light.values())
                _used.extend(AS_WRITTEN for u in units if u not in light and _includes_full(u))
                return result
            failed = True
            for unit, (_, header) in light.items():
                print(f"{FALLBACK} against {header}", flush=True)
                _failed_marker(unit, header).write_text(_digest(unit))
        ninja.write_text(written)
        _used.extend(AS_WRITTEN for unit in units if _includes_full(unit))
        if failed:
            print(f"light header: compiling as written ({FULL} as the source says)", flush=True)
        return run_ninja(build_directory, *args, **kwargs)

    lightened.lightens = True  # type: ignore[attr-defined]
    return lightened


def take() -> str | None:
    """What the CUDA units compiled since the last call read for the full header: the
    heaviest of what they read (AS_WRITTEN, LIGHT, OPS), None when none included it. Clears
    the tally."""
    used = set(_used)
    _used.clear()
    return next((header for header in (AS_WRITTEN, LIGHT, OPS) if header in used), None)


def first_error_text(log: str) -> str:
    """The part of a build's log that holds the compile whose error counts: after the light
    copy's failure, the as-written compile's."""
    return log.rsplit(FALLBACK, 1)[-1]


def _lightens(unit: Path, build: Path) -> bool:
    """A unit load_inline wrote into `build` (a unit of `load` stays where its own includes
    resolve) that includes the full header."""
    return unit.parent.resolve() == build.resolve() and _includes_full(unit)


def _lightest(
    units: list[Path], headers: tuple[str, ...], ninja: str
) -> dict[Path, tuple[Path, str]]:
    """Each of `units` that has a light copy left to try: the copy for the first of `headers`
    it did not fail with before and can use, and that header."""
    light = {}
    for unit in units:
        for header in headers:
            copy = _light_copy(unit, header, ninja)
            if copy is not None:
                light[unit] = (copy, header)
                break
    return light


def _failed_before(unit: Path, header: str) -> bool:
    try:
        return _failed_marker(unit, header).read_text() == _digest(unit)
    except OSError:
        return False


def _light_copy(unit: Path, header: str, ninja: str) -> Path | None:
    """`<stem>.light.cu` beside `unit`, its full header read as `header` (OPS: `_ops_header`,
    written beside it as `<stem>.light.h`), written only where its text changes (ninja
    rebuilds what is newer than its object); None where the unit cannot be read, failed with
    `header` before, or cannot use OPS."""
    try:
        text = unit.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if _failed_before(unit, header):
        return None
    include = f"<{header}>"
    if header == OPS:
        ops = _ops_header(text, _include_dirs(ninja))
        if ops is None:
            return None
        include = f'"{_refreshed(unit.with_name(f"{unit.stem}.light.h"), ops)}"'
    reads = OPS_READS if header == OPS else INCLUDE
    light = reads.sub(lambda m: f"{m.group(1)}{include}", text)
    return _refreshed(
        unit.with_name(f"{unit.stem}.light{unit.suffix}"), f'#line 1 "{unit}"\n{light}'
    )


def _refreshed(path: Path, text: str) -> Path:
    """`path`, holding `text`: written only where it held something else."""
    try:
        if path.read_text(encoding="utf-8") == text:
            return path
    except OSError:
        pass
    path.write_text(text, encoding="utf-8")
    return path


# What the OPS header leaves out of <torch/types.h>: <ATen/ATen.h>'s every-operator headers and
# the IR and operator-registration headers, which a kernel's glue does not use.
_OPS_DROPPED = re.compile(
    r"^[ \t]*#[ \t]*include[ \t]*<(ATen/NativeFunctions\.h|ATen/core/ivalue\.h"
    r"|ATen/core/jit_type\.h|torch/library\.h)>[ \t]*\n",
    re.MULTILINE,
)
PER_OPERATOR = "#ifndef AT_PER_OPERATOR_HEADERS\n#define AT_PER_OPERATOR_HEADERS\n#endif\n"
_EVERY_OP = re.compile(r"^[ \t]*#[ \t]*include[ \t]*<ATen/Functions\.h>[ \t]*\n", re.MULTILINE)
_ONCE = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+once[ \t]*\n", re.MULTILINE)
# The includes the OPS header stands for (load_inline puts <torch/types.h> before every unit)
OPS_READS = re.compile(
    r"^([ \t]*#[ \t]*include[ \t]*)[<\"]torch/(extension|types)\.h[>\"]", re.MULTILINE
)
_OTHER_TORCH = re.compile(
    r"^[ \t]*#[ \t]*include[ \t]*[<\"](torch/|ATen/ATen\.h|ATen/Functions\.h)", re.M
)
_WORD = re.compile(r"[A-Za-z_]\w*")
_INLINE = re.compile(r"^inline\b[^(;{]*?\b(\w+)\(", re.MULTILINE)


def _ops_header(text: str, include_dirs: list[Path]) -> str | None:
    """The OPS header for a unit of source `text`, read for its every <torch/extension.h> and
    <torch/types.h>: <torch/types.h> as installed (found in
    `include_dirs`), with <ATen/ATen.h> read as its own includes less the every-operator
    header, and in its place `<ATen/ops/NAME.h>` for each NAME the unit's text names; the
    operator-registration and IR headers left out. Each at:: function a unit can name is
    then declared with every overload it has in the full header; None where that cannot be
    said: a unit that includes another torch header, names `native::`, or calls a function
    that <ATen/Functions.h> declares itself (`at::size(t, d)`, `std(t, 1)`, but not
    `t.size(0)` or `std::vector`), or torch's headers are not where expected."""
    found = {name: _find(include_dirs, name) for name in ("torch/types.h", "ATen/ATen.h")}
    functions, ops = _find(include_dirs, "ATen/Functions.h"), _find(include_dirs, "ATen/ops")
    if (
        None in found.values()
        or functions is None
        or ops is None
        or _OTHER_TORCH.search(OPS_READS.sub("", text))
    ):
        return None
    if "native::" in text or _calls_any(text, _functions_own(functions)):
        return None
    named = sorted(set(_WORD.findall(text)) & _op_names(ops))
    aten, every = _EVERY_OP.subn(
        "".join(f"#include <ATen/ops/{name}.h>\n" for name in named), _read(found["ATen/ATen.h"])
    )
    aten = _ONCE.sub("", _OPS_DROPPED.sub("", aten))
    types = _ONCE.sub("", _OPS_DROPPED.sub("", _read(found["torch/types.h"])))
    if every != 1 or "#include <ATen/ATen.h>\n" not in types:
        return None
    lighter = types.replace("#include <ATen/ATen.h>\n", aten, 1)
    return f"#pragma once\n{PER_OPERATOR}{lighter}"


def _calls_any(text: str, names: frozenset[str]) -> bool:
    """Whether `text` calls one of `names` as a free function: unqualified, or as at:: or
    torch::, never as a member (`.`, `->`) or in another namespace (`std::`)."""
    for found in re.finditer(rf"\b({'|'.join(sorted(names))})\s*\(", text):
        before = text[: found.start()].rstrip()
        if before.endswith((".", "->")):
            continue
        if before.endswith("::") and not re.search(r"\b(at|torch)\s*::$", before):
            continue
        return True
    return False


@functools.cache
def _functions_own(functions: Path) -> frozenset[str]:
    """The functions <ATen/Functions.h> declares itself, beside its operators' headers."""
    return frozenset(_INLINE.findall(_read(functions))) or frozenset({"numel"})


@functools.cache
def _op_names(ops: Path) -> frozenset[str]:
    """The operators with a header of their own in ATen/ops (`NAME.h`)."""
    names = {path.name[:-2] for path in ops.glob("*.h")}
    return frozenset(name for name in names if not name.endswith(("_ops", "_native", "_meta")))


def _include_dirs(ninja: str) -> list[Path]:
    """The include folders of the CUDA compiles in a build.ninja (`-I` and `-isystem`)."""
    line = re.search(r"^cuda_cflags = (.*)$", ninja, re.MULTILINE)
    words = line.group(1).split() if line else []
    dirs = [b for a, b in itertools.pairwise(words) if a in ("-I", "-isystem")]
    return [Path(d) for d in dirs + [w[2:] for w in words if w.startswith("-I") and len(w) > 2]]


def _find(include_dirs: list[Path], name: str) -> Path | None:
    return next((d / name for d in include_dirs if (d / name).exists()), None)


def _read(path: Path | None) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path else ""


def _pointed(ninja: str, light: dict[Path, Path]) -> str:
    """The ninja file with each light unit's compile reading its copy."""
    by_path = {str(unit): str(copy) for unit, copy in light.items()}
    return CUDA_COMPILE.sub(lambda m: m.group(1) + by_path.get(m.group(2), m.group(2)), ninja)


def _includes_full(unit: Path) -> bool:
    try:
        return bool(INCLUDE.search(unit.read_text(encoding="utf-8", errors="replace")))
    except OSError:
        return False


def _failed_marker(unit: Path, header: str) -> Path:
    """Beside `unit`, the digest of its text where it failed to compile against `header`
    (LIGHT: it compiles as written)."""
    return unit.with_name(f"{unit.name}.{'ops-failed' if header == OPS else 'as-written'}")


def _digest(unit: Path) -> str:
    return hashlib.sha256(unit.read_bytes()).hexdigest()
