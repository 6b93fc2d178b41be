"""Point a compiler error in a generated source file back at the solution's own .py.

load_inline writes the source strings of a solution into `main.cpp` and `cuda.cu` of its build
folder, with lines of its own added (includes, bindings), and the compiler's errors name those
files. The line the compiler names is looked up, by its text, in the solution's .py file; where
the text occurs more than once, the lines around it decide, and where they cannot, nothing is
said rather than a wrong line.
"""

from __future__ import annotations

import re
from pathlib import Path

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
