"""Triton kernels as builds, inside the worker.

A Triton solution compiles nothing at import: `@triton.jit` keeps the function's source, and
each kernel compiles at its first launch with a new specialization (argument dtypes, sizes
divisible by 16, constexprs), once per configuration under `@triton.autotune`. So its
compiles happen inside the solution's first calls. The watcher frames each one as a build for
the parent (BuildStart, BuildEnd, through Triton's public hooks in `triton.knobs`): it runs
under --build-timeout, the record lists it (`triton <kernel>`, its seconds, whether Triton's
cache had it), and a compile that fails is the solution's `compile_error`, pointing at the
line of its file (`failure`). Each benchmark's inputs are first run by its correctness check,
before its timing (harness.measure.benchmarking), so its compiles, and `@triton.autotune`'s
search, happen there; one that still happens while timing is kept for a warning instead.

Triton's cache (`TRITON_CACHE_DIR`) is the solution's build folder's `triton/`
(harness.toolchain.prepare_environment), keyed by the solution's content like its extensions,
so a second run of the same file compiles nothing: each kernel is a cache hit.

Where no GPU is there, a solution whose module holds Triton kernels (`kernels_of`) is
`no_gpu` without being run: Triton compiles for a GPU and launches there only.
"""

from __future__ import annotations

import inspect
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from harness import verdicts
from harness.job import BuildEnd, BuildStart
from harness.measure.builds import Notify
from harness.record import Build
from harness.stats import PARTS
from harness.verdicts import Verdict

PREFIX = "triton "  # a Triton kernel's build is named so: "triton softmax_kernel"


def kernels_of(module: ModuleType) -> list[str]:
    """The names of the Triton kernels (`@triton.jit`, under `@triton.autotune` or
    `@triton.heuristics` too) defined at the top level of `module`; [] where Triton was never
    imported (and then Triton is not imported here either: a second or so a worker)."""
    if "triton" not in sys.modules:
        return []
    from triton.runtime.jit import KernelInterface

    return [name for name, value in vars(module).items() if isinstance(value, KernelInterface)]


@dataclass
class _Compiling:
    """The compile under way: its build and the kernel's function (where its lines start)."""

    build: Build
    function: Any  # triton.runtime.jit.JITFunction
    start: float
    cached: bool = False


class TritonWatcher:
    """Frames each Triton compile of the process as a build: `notify` hears BuildStart and
    BuildEnd, `builds` gets a Build per compile (the BuildWatcher's list, so that the record
    holds them with the extensions). A compile while a timing is under way (new inputs there
    gave a new specialization) is not announced: the parent then reads only the timing's
    answers from the worker; it is kept in `during_timing` instead, for the record's warnings."""

    def __init__(self, notify: Notify, builds: list[Build]) -> None:
        self.builds = builds
        self.current: _Compiling | None = None
        self.during_timing: list[str] = []
        self._notify = notify

    def notify(self, event: BuildStart | BuildEnd) -> None:
        if not PARTS.inside("timing"):
            self._notify(event)
        elif isinstance(event, BuildStart):
            self.during_timing.append(event.name.removeprefix(PREFIX))

    def warnings(self) -> list[str]:
        """A warning for the kernels that compiled while a timing was under way."""
        if not self.during_timing:
            return []
        named = ", ".join(sorted(set(self.during_timing)))
        return [
            f"Triton compiled {named} while timing (new inputs gave a new specialization): "
            "in the warm-up rounds or a timed call"
        ]

    def install(self) -> None:
        """Set Triton's compile hooks and listener (triton.knobs) to this watcher's."""
        from triton import knobs

        knobs.runtime.jit_cache_hook = self._before
        knobs.runtime.jit_post_compile_hook = self._after
        knobs.compilation.listener = self._heard

    def _before(self, *, fn: Any, **_: Any) -> bool:
        """A kernel is about to compile (its launch found no compiled kernel in memory)."""
        function = fn.jit_function
        build = Build(PREFIX + function.__name__, cuda=True)
        self.current = _Compiling(build, function, time.perf_counter())
        self.notify(BuildStart(build.name, cuda=True))
        return False  # compile it: a true answer would skip the compile

    def _heard(self, *, cache_hit: bool, **_: Any) -> None:
        """Triton's compiler is done: from its cache (`cache_hit`) or compiled."""
        if self.current is not None:
            self.current.cached = cache_hit

    def _after(self, **_: Any) -> None:
        """The kernel compiled: its build ends."""
        done, self.current = self.current, None
        if done is None:
            return
        seconds = time.perf_counter() - done.start
        self.builds.append(replace(done.build, seconds=seconds, cached=done.cached))
        self.notify(BuildEnd(done.build.name, seconds, done.cached))

    def failure(self, verdict: Verdict, solution: Path) -> Verdict:
        """`verdict` as the solution's compile_error where a Triton compile began and never
        ended (its error reached the checks as a runtime error), pointing at the line of
        `solution` where Triton's compiler stopped; else `verdict` as it is."""
        failed, self.current = self.current, None
        if failed is None or verdict.status != verdicts.RUNTIME_ERROR:
            return verdict
        self.notify(BuildEnd(failed.build.name, time.perf_counter() - failed.start))
        return Verdict(
            verdicts.COMPILE_ERROR, describe(verdict.__cause__, failed.function, solution)
        )


def describe(err: BaseException | None, function: Any, solution: Path) -> str:
    """One line for a failed compile of the Triton kernel `function`: the line of `solution`
    Triton's compiler stopped at (its errors count lines from the kernel's `def`), and what
    it said."""
    name = getattr(function, "__name__", "?")
    node = getattr(err, "node", None)
    said = getattr(err, "error_message", None) or _last_line(err)
    line = getattr(node, "lineno", None)
    first = _def_line(function)
    where = f" at line {first + line - 1} of {solution.name}" if line and first else ""
    return f"Triton kernel {name} failed to compile{where}: {said}"


def _def_line(function: Any) -> int | None:
    """The line of the file where the kernel's `def` stands (its decorators come before):
    Triton's own attribute where it has one, else found from the Python function's source
    (older Triton, torch 2.11's, has no `def_file_line_number`)."""
    known = getattr(function, "def_file_line_number", None)
    if known:
        return int(known)
    try:
        lines, start = inspect.getsourcelines(getattr(function, "fn", function))
    except (OSError, TypeError):
        return None
    found = (i for i, text in enumerate(lines) if text.lstrip().startswith("def "))
    offset = next(found, None)
    return None if offset is None else start + offset


def _last_line(err: BaseException | None) -> str:
    lines = [line for line in str(err or "").splitlines() if line.strip()]
    return lines[-1].strip() if lines else type(err).__name__
