"""The precompiled extension header (harness.measure.pch): how a build's ninja file is changed.
The header itself is made and used by every real C++ build in the tests (tests/test_build.py)."""

from __future__ import annotations

import os
from pathlib import Path

from harness.measure import pch


def build_folder(tmp_path: Path, name: str) -> tuple[Path, str]:
    include = tmp_path / "include"
    if not (include / "torch").exists():  # one header (its time is in the key)
        (include / "torch").mkdir(parents=True)
        (include / "torch" / "extension.h").write_text("#pragma once\nint torch_here();\n")
    build = tmp_path / name
    build.mkdir()
    (build / "main.cpp").write_text("#include <torch/extension.h>\nint f();\n")
    ninja = (
        f"cxx = c++\ncflags = -DTORCH_EXTENSION_NAME={name} -isystem {include} -O2\n"
        "post_cflags = \n\nrule compile\n  command = $cxx $cflags -c $in -o $out\n\n"
        f"build main.o: compile {build / 'main.cpp'}\n"
    )
    (build / "build.ninja").write_text(ninja)
    return build, ninja


def test_a_due_compile_waits_for_the_header_step_and_every_build_shares_one_header(
    tmp_path: Path,
) -> None:
    first, _ = build_folder(tmp_path, "first")
    gch = pch.prepare(first, tmp_path / ".pch")
    assert gch is not None and gch.name == "extension.h.gch"
    text = (first / "build.ninja").read_text()
    assert f"cflags = -I{gch.parent.parent} -DTORCH_EXTENSION_NAME=first" in text
    assert "rule harness_pch" in text and text.endswith(f"main.cpp || {gch}\n")
    # The header itself lies beside its .gch, for the includes that cannot use the .gch.
    assert (gch.parent / "extension.h").resolve() == (tmp_path / "include/torch/extension.h")
    second, _ = build_folder(tmp_path, "second")  # another extension name, the same flags
    assert pch.prepare(second, tmp_path / ".pch") == gch


def test_a_build_that_is_up_to_date_keeps_its_commands_and_gets_no_header_step(
    tmp_path: Path,
) -> None:
    build, ninja = build_folder(tmp_path, "done")
    (build / "main.o").write_bytes(b"")
    later = (build / "main.cpp").stat().st_mtime_ns + 10**9
    os.utime(build / "main.o", ns=(later, later))
    gch = pch.prepare(build, tmp_path / ".pch")
    assert gch is not None
    text = (build / "build.ninja").read_text()
    assert f"cflags = -I{gch.parent.parent} " in text and "harness_pch" not in text
    assert pch.prepare(build, tmp_path / ".pch") == gch  # applied again: no second -I
    assert (build / "build.ninja").read_text() == text
    (build / "build.ninja").write_text(ninja.replace("#include", "x"))  # a C++ source that
    (build / "main.cpp").write_text("int f();\n")  # does not begin with the header
    assert pch.prepare(build, tmp_path / ".pch") is None


def test_a_failed_header_is_noted_and_not_tried_again(tmp_path: Path) -> None:
    gch = tmp_path / "key" / "torch" / "extension.h.gch"
    pch.make(gch, ["false"])
    assert not gch.exists() and gch.with_name("extension.h.gch.failed").exists()
    pch.make(gch, ["touch", str(gch)])  # not run: the failure stands
    assert not gch.exists()
