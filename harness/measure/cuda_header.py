"""A lighter PyTorch header for a build's CUDA units, with the source as written to fall back on.

LLM-written CUDA sources almost always `#include <torch/extension.h>`: all of PyTorch's C++
frontend and pybind11, which nvcc parses twice (device and host) and which takes most of a
build's minute. Their CUDA code needs `<torch/types.h>` (ATen, the tensor factories, the
`torch::` names), which `<torch/extension.h>` includes itself, through `<torch/all.h>`.

So each CUDA unit that `load_inline` wrote into its build folder and that includes
`<torch/extension.h>` compiles from a copy beside it, `<stem>.light.cu`, where that include
reads `<torch/types.h>` and nothing else differs: a `#line` directive keeps the compiler's
file names and line numbers those of the unit as written. A unit that uses what only the full
header declares (pybind11, `torch::nn`) fails to compile that way; the build then compiles the
unit as written, and remembers it (`<stem>.cu.as-written`, holding the unit's digest), so a
later load of the same source neither tries again nor rebuilds. The one way the two could
compile differently is an overload declared only in the full header that C++ would prefer for
a call: the light copy would call the other one (docs/problems.md). The worker's log says
which unit compiled from what, and each build's record holds it (`Build.cuda_header`).

HARNESS_LIGHT_HEADER=0 compiles every unit as written.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

FULL, LIGHT = "torch/extension.h", "torch/types.h"
AS_WRITTEN = "as written"  # Build.cuda_header of a unit that fell back
INCLUDE = re.compile(rf"^([ \t]*#[ \t]*include[ \t]*)[<\"]{re.escape(FULL)}[>\"]", re.MULTILINE)
CUDA_COMPILE = re.compile(r"^(build \S+\.o: cuda_compile )(\S+)$", re.MULTILINE)
SWITCH = "HARNESS_LIGHT_HEADER"
FALLBACK = "light header: compiling as written"  # the log's line before the as-written compile
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
    """`run_ninja` (torch's `_run_ninja_build`), compiling light units where they compile."""

    def lightened(build_directory: str, *args: Any, **kwargs: Any) -> Any:
        build = Path(build_directory)
        ninja = build / "build.ninja"
        written = ninja.read_text()
        units = [Path(source) for _, source in CUDA_COMPILE.findall(written)]
        copies = {unit: _light_copy(unit) for unit in units if _lightens(unit, build)}
        light = {unit: copy for unit, copy in copies.items() if copy is not None}
        if not light:
            _used.extend(AS_WRITTEN for unit in units if _includes_full(unit))
            return run_ninja(build_directory, *args, **kwargs)
        ninja.write_text(_pointed(written, light))
        for unit, copy in light.items():
            print(
                f"light header: {unit.name} compiles as {copy.name} ({FULL} read as {LIGHT})",
                flush=True,
            )
        try:
            result = run_ninja(build_directory, *args, **kwargs)
        except (RuntimeError, subprocess.CalledProcessError):
            result = _FAILED
        if result is not _FAILED:
            _used.extend(LIGHT for _ in light)
            return result
        print(f"{FALLBACK}: the light copy did not compile; {FULL} as the source says", flush=True)
        for unit in light:
            _as_written(unit).write_text(_digest(unit))
        ninja.write_text(written)
        _used.extend(AS_WRITTEN for _ in light)
        return run_ninja(build_directory, *args, **kwargs)

    lightened.lightens = True  # type: ignore[attr-defined]
    return lightened


def take() -> str | None:
    """What the CUDA units compiled since the last call read: LIGHT when every unit that
    includes the full header compiled from its light copy, AS_WRITTEN when one fell back, None
    when none included it. Clears the tally."""
    used = list(_used)
    _used.clear()
    if not used:
        return None
    return AS_WRITTEN if AS_WRITTEN in used else LIGHT


def first_error_text(log: str) -> str:
    """The part of a build's log that holds the compile whose error counts: after the light
    copy's failure, the as-written compile's."""
    return log.rsplit(FALLBACK, 1)[-1]


def _lightens(unit: Path, build: Path) -> bool:
    """A unit load_inline wrote into `build` (a unit of `load` stays where its own includes
    resolve), that includes the full header, and did not fail light before."""
    if unit.parent.resolve() != build.resolve() or not _includes_full(unit):
        return False
    try:
        return _as_written(unit).read_text() != _digest(unit)
    except OSError:
        return True


def _light_copy(unit: Path) -> Path | None:
    """`<stem>.light.cu` beside `unit`, written only where its text changes (ninja rebuilds
    what is newer than its object); None where the unit cannot be read."""
    try:
        text = unit.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    light = INCLUDE.sub(lambda m: f"{m.group(1)}<{LIGHT}>", text)
    light = f'#line 1 "{unit}"\n{light}'
    copy = unit.with_name(f"{unit.stem}.light{unit.suffix}")
    try:
        if copy.read_text(encoding="utf-8") == light:
            return copy
    except OSError:
        pass
    copy.write_text(light, encoding="utf-8")
    return copy


def _pointed(ninja: str, light: dict[Path, Path]) -> str:
    """The ninja file with each light unit's compile reading its copy."""
    by_path = {str(unit): str(copy) for unit, copy in light.items()}
    return CUDA_COMPILE.sub(lambda m: m.group(1) + by_path.get(m.group(2), m.group(2)), ninja)


def _includes_full(unit: Path) -> bool:
    try:
        return bool(INCLUDE.search(unit.read_text(encoding="utf-8", errors="replace")))
    except OSError:
        return False


def _as_written(unit: Path) -> Path:
    return unit.with_name(f"{unit.name}.as-written")


def _digest(unit: Path) -> str:
    return hashlib.sha256(unit.read_bytes()).hexdigest()
