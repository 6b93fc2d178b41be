"""The light header for CUDA units (harness.measure.builds), on ninja files shaped as torch
writes them, compiled by the host's C++ compiler against stand-in PyTorch headers: a unit that
compiles against <torch/types.h> does so; one that needs more compiles as written, once."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from harness.measure import builds

pytestmark = pytest.mark.skipif(
    not (shutil.which("ninja") and shutil.which("c++")), reason="needs ninja and a C++ compiler"
)
LIGHT_ONLY = "#include <torch/extension.h>\nint kernel() { return light(); }\n"
NEEDS_FULL = '#  include "torch/extension.h"\nint kernel() { return light() + full_only(); }\n'


def _run_ninja(build_directory: str, verbose: bool, error_prefix: str) -> None:
    """torch's _run_ninja_build, in short: ninja in the folder, a failure a RuntimeError."""
    done = subprocess.run(["ninja"], cwd=build_directory, capture_output=True, text=True)
    print(done.stdout)
    if done.returncode != 0:
        raise RuntimeError(f"{error_prefix}: {done.stdout}")


def _build(tmp_path: Path, source: str) -> Path:
    include = tmp_path / "include" / "torch"
    include.mkdir(parents=True, exist_ok=True)
    (include / "types.h").write_text("#pragma once\nint light();\n")
    (include / "extension.h").write_text(
        "#pragma once\n#include <torch/types.h>\nint full_only();\n"
    )
    build = tmp_path / "ext"
    build.mkdir(exist_ok=True)
    (build / "cuda.cu").write_text(source)
    (build / "build.ninja").write_text(
        f"rule cuda_compile\n  command = c++ -x c++ -I{tmp_path / 'include'} -c $in -o $out\n\n"
        f"build cuda.cuda.o: cuda_compile {build / 'cuda.cu'}\n"
    )
    return build


def test_a_unit_that_compiles_light_does_and_a_second_load_compiles_nothing(tmp_path, capsys):
    build = _build(tmp_path, LIGHT_ONLY)
    written = (build / "build.ninja").read_text()
    run = builds.wrap(_run_ninja)
    run(str(build), True, "build failed")
    assert builds.take() == builds.LIGHT
    light = (build / "cuda.light.cu").read_text()
    assert light.startswith(f'#line 1 "{build / "cuda.cu"}"\n#include <torch/types.h>\n')
    assert "cuda.light.cu" in (build / "build.ninja").read_text()
    assert "cuda.cu compiles as cuda.light.cu" in capsys.readouterr().out
    made = (build / "cuda.cuda.o").stat().st_mtime_ns
    (build / "build.ninja").write_text(written)  # torch writes its own file again at each load
    run(str(build), True, "build failed")
    assert (build / "cuda.cuda.o").stat().st_mtime_ns == made  # the same command: up to date
    assert builds.take() == builds.LIGHT


def test_a_unit_that_needs_the_full_header_compiles_as_written_and_is_remembered(tmp_path):
    build = _build(tmp_path, NEEDS_FULL)
    run = builds.wrap(_run_ninja)
    run(str(build), True, "build failed")
    assert builds.take() == builds.AS_WRITTEN
    assert f"cuda_compile {build / 'cuda.cu'}" in (build / "build.ninja").read_text()
    made = (build / "cuda.cuda.o").stat().st_mtime_ns
    (build / "cuda.light.cu").unlink()
    run(str(build), True, "build failed")  # no second try of the light copy, no rebuild
    assert not (build / "cuda.light.cu").exists()
    assert (build / "cuda.cuda.o").stat().st_mtime_ns == made
    assert builds.take() == builds.AS_WRITTEN
    (build / "cuda.cu").write_text(LIGHT_ONLY)  # a changed source is tried light again
    run(str(build), True, "build failed")
    assert builds.take() == builds.LIGHT


def test_a_unit_that_fails_either_way_reports_the_error_of_the_source_as_written(tmp_path, capsys):
    build = _build(tmp_path, LIGHT_ONLY.replace("light()", "light() + undeclared"))
    with pytest.raises(RuntimeError):
        builds.wrap(_run_ninja)(str(build), True, "build failed")
    log = capsys.readouterr().out
    assert log.count("undeclared") >= 2  # both compiles failed on it
    shown = builds.first_error_text(log)
    assert "cuda.light.cu" not in shown and "undeclared" in shown
    assert builds.take() == builds.AS_WRITTEN


def test_units_without_the_full_header_or_outside_the_build_folder_are_left_alone(tmp_path):
    build = _build(tmp_path, "#include <torch/types.h>\nint kernel() { return light(); }\n")
    builds.wrap(_run_ninja)(str(build), True, "build failed")
    assert builds.take() is None and not (build / "cuda.light.cu").exists()
    elsewhere = tmp_path / "kernel.cu"  # load()'s own file: its includes resolve beside it
    elsewhere.write_text(LIGHT_ONLY)
    ninja = build / "build.ninja"
    ninja.write_text(ninja.read_text().replace(str(build / "cuda.cu"), str(elsewhere)))
    builds.wrap(_run_ninja)(str(build), True, "build failed")
    assert builds.take() == builds.AS_WRITTEN
    assert not (tmp_path / "kernel.light.cu").exists()


def _aten(tmp_path: Path, source: str) -> Path:
    """A build whose stand-in PyTorch has ATen as torch lays it out: <torch/types.h> includes
    <ATen/ATen.h>, which includes every operator's header through <ATen/Functions.h> (with a
    function of its own, `numel`) and the IR's header (`ivalue_only`)."""
    include = tmp_path / "include"
    headers = {
        "torch/types.h": "#pragma once\n#include <ATen/ATen.h>\nint light();\n",
        "torch/extension.h": "#pragma once\n#include <torch/types.h>\nint full_only();\n",
        "ATen/ATen.h": "#pragma once\n#include <ATen/Functions.h>\n#include <ATen/core/ivalue.h>\n"
        "#include <ATen/core/base.h>\n",
        "ATen/Functions.h": "#pragma once\n#include <ATen/ops/relu.h>\n#include <ATen/ops/sum.h>\n"
        "inline int numel(int t) { return t; }\n",
        "ATen/ops/relu.h": "#pragma once\nint relu(int);\n",
        "ATen/ops/sum.h": "#pragma once\nint sum(int);\n",
        "ATen/core/ivalue.h": "#pragma once\nint ivalue_only();\n",
        "ATen/core/base.h": "#pragma once\nint base();\nstruct T { int numel() { return 2; } };\n",
    }
    for name, text in headers.items():
        (include / name).parent.mkdir(parents=True, exist_ok=True)
        (include / name).write_text(text)
    build = tmp_path / "ext"
    build.mkdir(exist_ok=True)
    (build / "cuda.cu").write_text(source)
    (build / "build.ninja").write_text(
        f"cuda_cflags = -DX -isystem {include}\n"
        "rule cuda_compile\n  command = c++ -x c++ $cuda_cflags -c $in -o $out\n\n"
        f"build cuda.cuda.o: cuda_compile {build / 'cuda.cu'}\n"
    )
    return build


def test_a_unit_compiles_against_the_headers_of_the_operators_it_names(tmp_path, capsys):
    source = "#include <torch/extension.h>\n"
    source += "int kernel() { T t; return light() + relu(base()) + t.numel(); }\n"
    build = _aten(tmp_path, source)
    builds.wrap(_run_ninja)(str(build), True, "build failed")
    assert builds.take() == builds.OPS
    header = (build / "cuda.light.h").read_text()
    assert "#define AT_PER_OPERATOR_HEADERS" in header
    assert "#include <ATen/ops/relu.h>" in header and "ops/sum.h" not in header
    assert "Functions.h" not in header and "ivalue.h" not in header and "int light();" in header
    assert f'#include "{build / "cuda.light.h"}"' in (build / "cuda.light.cu").read_text()
    assert "read as ATen operator headers" in capsys.readouterr().out


def test_a_unit_calling_what_functions_h_declares_itself_skips_the_operator_headers(tmp_path):
    # `numel(3)` is Functions.h's own overload: without it C++ could pick another; a member
    # call of the same name (above) is not such a call
    build = _aten(tmp_path, "#include <torch/extension.h>\nint kernel() { return numel(3); }\n")
    builds.wrap(_run_ninja)(str(build), True, "build failed")
    assert builds.take() == builds.LIGHT
    assert not (build / "cuda.light.h").exists()


def test_a_unit_that_needs_more_than_its_operators_compiles_light_and_is_remembered(
    tmp_path, capsys
):
    source = "#include <torch/extension.h>\nint kernel() { return ivalue_only() + light(); }\n"
    build = _aten(tmp_path, source)
    written = (build / "build.ninja").read_text()
    run = builds.wrap(_run_ninja)
    run(str(build), True, "build failed")
    assert builds.take() == builds.LIGHT
    assert f"{builds.FALLBACK} against {builds.OPS}" in capsys.readouterr().out
    assert (build / "cuda.cu.ops-failed").exists() and not (build / "cuda.cu.as-written").exists()
    made = (build / "cuda.cuda.o").stat().st_mtime_ns
    (build / "build.ninja").write_text(written)  # as torch writes it again at each load
    run(str(build), True, "build failed")  # neither the operators' headers again nor a rebuild
    assert builds.OPS not in capsys.readouterr().out
    assert (build / "cuda.cuda.o").stat().st_mtime_ns == made
    assert builds.take() == builds.LIGHT
