"""Watch the extension builds a solution makes, inside the worker.

Solutions call torch's `load_inline` or `load` themselves, usually at import. The watcher wraps
both so the harness knows which extensions were built, whether they hold CUDA code, how long
each took, whether it was only loaded from the build cache (its module file was there before and
was left untouched), and whether a failure happened inside a build (a compile error) or
elsewhere.
"""

from __future__ import annotations

import inspect
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.measure import cuda_header, pch, sourcemap
from harness.measure.events import BuildEnd, BuildStart

Notify = Callable[[BuildStart | BuildEnd], None]


class NoCudaToolchain(RuntimeError):
    """A CUDA build was asked for where torch has no CUDA or no toolkit was found."""


@dataclass
class Build:
    name: str
    cuda: bool
    seconds: float | None = None
    cached: bool = False  # loaded from the build cache: nothing was compiled
    hint: str | None = None  # how it could build faster (slow_header)
    # what its CUDA units read for <torch/extension.h> (harness.measure.cuda_header)
    cuda_header: str | None = None

    def describe(self) -> str:
        if self.cached:
            return f"{self.name} compiled earlier (loaded from the build cache)"
        return f"{self.name} compiled in {self.seconds or 0:.0f} s"


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
        cuda_header.install()  # before the precompiled header's wrapper, which runs around it
        if self.cache is not None:
            pch.install(self.cache)

    def _wrap(self, original: Callable[..., Any], kind: str) -> Callable[..., Any]:
        signature = inspect.signature(original)

        def build(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.arguments["verbose"] = True  # the compiler's own output goes to the log
            current = Build(str(bound.arguments.get("name")), _uses_cuda(kind, bound.arguments))
            self.current = current
            if current.cuda and self.cuda_toolchain:
                raise NoCudaToolchain(self.cuda_toolchain)
            modules = _modules(bound.arguments)
            # `found`: a module built before lies in its folder, so this is likely only a load
            self.notify(BuildStart(current.name, current.cuda, found=bool(modules)))
            self.log_offset = self.log.stat().st_size if self.log and self.log.exists() else 0
            start = time.perf_counter()
            cuda_header.take()  # what an earlier, failed build left in the tally
            result = original(*bound.args, **bound.kwargs)
            current.seconds = time.perf_counter() - start
            current.cached = bool(modules) and _modules(bound.arguments) == modules
            self.builds.append(current)
            self.current = None
            current.cuda_header = cuda_header.take()
            if not (current.cached or current.cuda_header):  # the light header was not tried
                current.hint = slow_header(kind, bound.arguments)
            self.notify(BuildEnd(current.name, current.seconds, current.cached, current.hint))
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
                text = cuda_header.first_error_text(handle.read().decode(errors="replace"))
        return _short(sourcemap.annotate(_first_error(f"{text}\n{err}"), solution))


def _modules(arguments: dict[str, Any]) -> dict[Path, int]:
    """The built modules in an extension's build folder, with their times of change: the same
    before and after a build when it only loaded them from the cache."""
    folder = arguments.get("build_directory")
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if not folder and root:
        folder = os.path.join(root, str(arguments.get("name")))
    if not folder or not os.path.isdir(folder):
        return {}
    return {p: p.stat().st_mtime_ns for p in Path(folder).glob("*.so")}


def _uses_cuda(kind: str, arguments: dict[str, Any]) -> bool:
    if arguments.get("with_cuda"):
        return True
    if kind == "load_inline":
        return bool(arguments.get("cuda_sources"))
    return bool(_cuda_files(arguments))


def _cuda_files(arguments: dict[str, Any]) -> list[Path]:
    """The CUDA files among `load`'s sources (a path, or a list of them)."""
    sources = arguments.get("sources") or []
    paths = [Path(s) for s in ([sources] if isinstance(sources, str) else sources)]
    return [path for path in paths if str(path).endswith((".cu", ".cuh"))]


_EXTENSION_H = re.compile(rf"#\s*include\s*[<\"]{re.escape(pch.HEADER)}[>\"]")
SLOW_HEADER = (
    "its CUDA source includes <torch/extension.h>; <torch/types.h> is enough there and nvcc "
    "takes well under half the time (docs/problems.md)"
)


def slow_header(kind: str, arguments: dict[str, Any]) -> str | None:
    """SLOW_HEADER where the build's CUDA sources include <torch/extension.h>, else None."""
    if kind == "load_inline":
        sources = arguments.get("cuda_sources") or []
        texts = [sources] if isinstance(sources, str) else list(sources)
    else:
        texts = [_text(path) for path in _cuda_files(arguments)]
    return SLOW_HEADER if any(_EXTENSION_H.search(text) for text in texts) else None


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
