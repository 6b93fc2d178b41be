"""Watching builds without building: a cache hit claims no build, and a compile error in a
generated file is pointed back at the solution's own .py (the real builds are in test_build)."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import pytest

from harness.job import BuildEnd, BuildStart, Event
from harness.measure import builds
from harness.record import Build
from harness.run.progress import Progress

SOLUTION = '''"""A solution whose C++ lives in a string."""

from torch.utils.cpp_extension import load_inline

SOURCE = """
#include <torch/extension.h>

torch::Tensor twice(torch::Tensor x) {
    return x * 2;
}

torch::Tensor thrice(torch::Tensor x) {
    return undefined_name(x);
}
"""
'''


def generate(folder: Path, source: str) -> Path:
    """main.cpp as load_inline writes it: its include, the source string, the bindings."""
    main = folder / "main.cpp"
    main.write_text("\n".join(["#include <torch/extension.h>", source, "PYBIND11_MODULE() {}"]))
    return main


@pytest.fixture
def written(tmp_path: Path) -> tuple[Path, Path]:
    solution = tmp_path / "mine.py"
    solution.write_text(SOLUTION)
    source = SOLUTION.split('SOURCE = """', 1)[1].split('"""', 1)[0]
    return solution, generate(tmp_path, source)


def test_a_gcc_error_names_the_line_of_the_solution_too(written: tuple[Path, Path]) -> None:
    solution, main = written
    line = main.read_text().splitlines().index("    return undefined_name(x);") + 1
    error = f"{main}:{line}:12: error: 'undefined_name' was not declared in this scope"
    assert builds.annotate(error, solution) == (
        f"{main}:{line}:12 (mine.py line 13): error: 'undefined_name' was not declared in this "
        "scope"
    )


def test_a_line_found_twice_is_told_apart_by_the_lines_around_it(
    written: tuple[Path, Path],
) -> None:
    solution, main = written
    lines = main.read_text().splitlines()
    second_close = [i for i, text in enumerate(lines) if text == "}"][1] + 1
    assert builds.solution_line(main, second_close, solution) == 14
    error = f"{main}({second_close}): error: expected a ';'"  # nvcc's form
    assert f"({second_close}) (mine.py line 14): error" in builds.annotate(error, solution)


def test_nothing_is_added_where_the_line_cannot_be_found(written: tuple[Path, Path]) -> None:
    solution, main = written
    bindings = len(main.read_text().splitlines())  # load_inline's own line, not the solution's
    for error in (
        f"{main}:{bindings}:1: error: in the bindings",
        f"{main}:{bindings + 5}:1: error: past the end",
        "/gone/main.cpp:3:1: error: no such file",
        "ninja: build stopped: subcommand failed.",
    ):
        assert builds.annotate(error, solution) == error
    assert builds.annotate(f"{main}:9:1: error: x", None) == f"{main}:9:1: error: x"


def test_the_failure_line_is_short_and_points_into_the_solution(
    written: tuple[Path, Path], tmp_path: Path
) -> None:
    solution, main = written
    line = main.read_text().splitlines().index("    return undefined_name(x);") + 1
    log = tmp_path / "worker.log"
    log.write_text(f"[1/2] c++ -c main.cpp\nFAILED: main.o\n{main}:{line}:12: error: boom\n")
    watcher = builds.BuildWatcher(lambda *a, **k: None, None, log)
    assert watcher.failure(RuntimeError("Error building extension"), solution) == (
        f"main.cpp:{line}:12 (mine.py line 13): error: boom"
    )


def watched(tmp_path: Path, compiles: bool) -> tuple[list[Any], Build]:
    """One load_inline through the watcher: a fake torch builder that writes the module
    (`compiles`) or leaves the one already there."""
    events: list[BuildStart | BuildEnd] = []
    watcher = builds.BuildWatcher(events.append, None)
    folder = tmp_path / "ext"

    def load_inline(name: str, cpp_sources: str, build_directory: str | None = None) -> str:
        if compiles:  # a new module, a second later than any before (as a real build is)
            folder.mkdir(exist_ok=True)
            module = folder / f"{name}.so"
            later = module.stat().st_mtime_ns + 10**9 if module.exists() else 10**18
            module.write_bytes(b"module")
            os.utime(module, ns=(later, later))
        return "module"

    wrap = watcher._wrap(load_inline, "load_inline")
    wrap(name="ext", cpp_sources="int x;", build_directory=str(folder))
    return events, watcher.builds[0]


def test_a_build_cache_hit_is_told_from_a_build(tmp_path: Path) -> None:
    events, built = watched(tmp_path, compiles=True)
    assert events == [BuildStart("ext"), BuildEnd("ext", built.seconds or 0.0)]
    assert not built.cached
    events, loaded = watched(tmp_path, compiles=False)  # the module is there, left untouched
    assert loaded.cached and events[0].found is True and events[1].cached is True
    assert loaded.describe() == "ext compiled earlier (loaded from the build cache)"
    events, rebuilt = watched(tmp_path, compiles=True)  # there, but written again
    assert not rebuilt.cached and rebuilt.describe().startswith("ext compiled in ")


def test_a_cuda_source_that_includes_the_whole_extension_header_gets_a_hint(
    tmp_path: Path,
) -> None:
    slow = "#include <torch/extension.h>\n__global__ void k() {}"
    assert builds.slow_header("load_inline", {"cuda_sources": [slow]}) == builds.SLOW_HEADER
    assert builds.slow_header("load_inline", {"cuda_sources": "#include <cuda.h>"}) is None
    assert builds.slow_header("load_inline", {"cpp_sources": slow}) is None  # C++: precompiled
    kernel = tmp_path / "k.cu"
    kernel.write_text('#  include "torch/extension.h"\n')
    assert builds.slow_header("load", {"sources": [str(kernel), "main.cpp"]}) is not None
    kernel.write_text("#include <torch/types.h>\n")
    assert builds.slow_header("load", {"sources": str(kernel)}) is None
    shown = progress_lines([BuildEnd("ext", 140.0, hint=builds.SLOW_HEADER)])
    assert f"toy/mine: built ext in 140.0 s ({builds.SLOW_HEADER})" in shown


def progress_lines(events: list[Event]) -> str:
    stream = io.StringIO()  # not a terminal: every line stays
    progress = Progress(stream)
    progress.start(1, 1, "toy/mine")
    for event in events:
        progress.event(event)
    return stream.getvalue()


def test_progress_claims_no_build_on_a_cache_hit() -> None:
    hit = progress_lines(
        [
            BuildStart("ext", cuda=False, found=True),
            BuildEnd("ext", 0.01, cached=True),
        ]
    )
    assert "loading C++ extension ext from the build cache" in hit
    assert "toy/mine: loaded ext from the build cache" in hit
    assert "built" not in hit and "building" not in hit
    miss = progress_lines(
        [
            BuildStart("ext", cuda=True, found=False),
            BuildEnd("ext", 70.0, cached=False),
        ]
    )
    assert "building CUDA extension ext" in miss and "toy/mine: built ext in 70.0 s" in miss
