"""The precompiled extension header (harness.measure.pch): how a build's ninja file is changed.
The header itself is made and used by every real C++ build in the tests (tests/test_build.py)."""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from harness.measure import pch
from tests.conftest import REPO


def _ninja_of(build: Path) -> str:
    """The ninja file torch writes again for `build` (build_folder's)."""
    include = build.parent / "include"
    return (
        f"cxx = c++\ncflags = -DTORCH_EXTENSION_NAME={build.name} -isystem {include} -O2\n"
        "post_cflags = \n\nrule compile\n  command = $cxx $cflags -c $in -o $out\n\n"
        f"build main.o: compile {build / 'main.cpp'}\n"
    )


def build_folder(tmp_path: Path, name: str) -> tuple[Path, str]:
    include = tmp_path / "include"
    if not (include / "torch").exists():  # one header (its time is in the key)
        (include / "torch").mkdir(parents=True)
        (include / "torch" / "extension.h").write_text("#pragma once\nint torch_here();\n")
    build = tmp_path / name
    build.mkdir()
    (build / "main.cpp").write_text("#include <torch/extension.h>\nint f();\n")
    ninja = _ninja_of(build)
    (build / "build.ninja").write_text(ninja)
    return build, ninja


def test_a_due_compile_waits_for_the_header_step_and_every_build_shares_one_header(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr(pch, "PAYS_AFTER", 0)
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


def test_a_flag_set_s_first_compiles_go_without_the_header_and_the_next_makes_it(
    tmp_path: Path,
) -> None:
    steps = []
    for k in range(pch.PAYS_AFTER + 2):
        build, _ = build_folder(tmp_path, f"b{k}")
        gch = pch.prepare(build, tmp_path / ".pch")
        assert gch is not None  # the same include folder either way: commands stay the same
        text = (build / "build.ninja").read_text()
        assert f"cflags = -I{gch.parent.parent} " in text
        steps.append("rule harness_pch" in text)
    assert steps == [False] * pch.PAYS_AFTER + [True, True]  # until the header is there


def test_flag_sets_that_compile_the_header_the_same_share_one(tmp_path: Path) -> None:
    include = tmp_path / "include"
    (include / "torch").mkdir(parents=True)
    header = include / "torch" / "extension.h"
    header.write_text("#pragma once\n#include <beside.h>\nint torch_here();\n")
    for name, text in (("a", "int beside;\n"), ("b", "long beside;\n"), ("empty", None)):
        (tmp_path / name).mkdir()
        if text:
            (tmp_path / name / "beside.h").write_text(text)
    base = ["-isystem", str(include), "-isystem", str(tmp_path / "a")]

    def key(*more: str, flags: list[str] = base) -> str:
        return pch._key("c++", "g++ (test) 1", [*flags, *more], header, tmp_path / ".pch")

    assert key("-O3") == key("-O3", "-isystem", str(tmp_path / "empty"))  # reads nothing there
    assert key("-O3") == key("-O3")  # from the kept key, without preprocessing again
    other = ["-isystem", str(include), "-isystem", str(tmp_path / "b")]
    assert key("-O3") != key("-O3", flags=other)  # another beside.h: another text
    # GCC takes an -O3 header for an -O2 compile, but the code differs (docs/problems.md);
    # -fopenmp and the -O0 macros it refuses: each keeps its own header.
    assert len({key("-O3"), key("-O2"), key(), key("-O3", "-fopenmp"), key("-O3", "-DX")}) == 5


def test_in_the_sandbox_the_key_is_worked_out_and_nothing_is_written(
    tmp_path: Path, monkeypatch
) -> None:
    build_folder(tmp_path, "boxed")  # its header
    header, root = tmp_path / "include" / "torch" / "extension.h", tmp_path / ".pch"
    flags = ["-isystem", str(tmp_path / "include"), "-O2"]
    monkeypatch.setenv(pch.READ_ONLY, "1")  # a write there is a rejected solution
    boxed = pch._key("c++", "g++ (test) 1", flags, header, root)
    assert not root.exists()
    monkeypatch.delenv(pch.READ_ONLY)
    assert pch._key("c++", "g++ (test) 1", flags, header, root) == boxed  # kept outside
    assert list((root / pch.KEYS).iterdir())


def test_a_failed_header_is_noted_and_not_tried_again(tmp_path: Path) -> None:
    gch = tmp_path / "key" / "torch" / "extension.h.gch"
    pch.make(gch, ["false"])
    assert not gch.exists() and gch.with_name("extension.h.gch.failed").exists()
    pch.make(gch, ["touch", str(gch)])  # not run: the failure stands
    assert not gch.exists()


def test_a_sandboxed_build_gets_its_header_from_the_harness_made_outside(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr(pch, "PAYS_AFTER", 0)
    build, _ = build_folder(tmp_path, "boxed")
    scratch, root = tmp_path / "scratch", tmp_path / "cache" / ".pch"
    scratch.mkdir()
    monkeypatch.delenv("HARNESS_PCH_DIR", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv(pch.READ_ONLY, "1")
    monkeypatch.setenv("HARNESS_SANDBOX_SCRATCH", str(scratch))
    asking = concurrent.futures.ThreadPoolExecutor(1).submit(pch.prepare, build, root)
    while not (scratch / pch.ASKED).exists():  # the build waits for the harness
        assert not asking.done(), asking.result()
        time.sleep(0.05)
    pch.answer(scratch, tmp_path / "cache", trusted=[tmp_path / "include"])
    gch = asking.result(timeout=60)
    assert gch is not None and gch.is_file() and gch.is_relative_to(root)
    assert f"cflags = -I{gch.parent.parent} " in (build / "build.ninja").read_text()


def test_a_sandboxed_build_told_not_yet_keeps_the_commands_it_will_have_with_the_header(
    tmp_path: Path, monkeypatch
) -> None:
    build, _ = build_folder(tmp_path, "boxed")
    scratch, root = tmp_path / "scratch", tmp_path / "cache" / ".pch"
    scratch.mkdir()
    for name in ("HARNESS_PCH_DIR", "CXX"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(pch.READ_ONLY, "1")
    monkeypatch.setenv("HARNESS_SANDBOX_SCRATCH", str(scratch))
    asking = concurrent.futures.ThreadPoolExecutor(1).submit(pch.prepare, build, root)
    while not (scratch / pch.ASKED).exists():
        assert not asking.done(), asking.result()
        time.sleep(0.05)
    assert pch.answer(scratch, tmp_path / "cache", trusted=[tmp_path / "include"]) is None
    assert "not yet" in (scratch / pch.REFUSED).read_text()  # its first compile goes without
    gch = asking.result(timeout=60)
    assert gch is not None and not gch.exists()
    # counted once, by the harness: the sandboxed build wrote nothing (a write is a rejection)
    assert (gch.parent.parent / "compiles").read_text() == "1\n"
    told = (build / "build.ninja").read_text()
    assert f"cflags = -I{gch.parent.parent} " in told and "harness_pch" not in told
    gch.write_bytes(b"")  # made later, for another build
    (build / "main.o").write_bytes(b"")  # this one's objects up to date: nothing to compile
    later = (build / "main.cpp").stat().st_mtime_ns + 10**9
    os.utime(build / "main.o", ns=(later, later))
    (build / "build.ninja").write_text(_ninja_of(build))
    assert pch.prepare(build, root) == gch
    assert (build / "build.ninja").read_text() == told  # the same commands: no rebuild


def test_the_harness_makes_no_header_from_flags_that_could_read_a_solutions_files(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.delenv("CXX", raising=False)
    include = tmp_path / "include"
    build_folder(tmp_path, "any")
    header = str(include / "torch" / "extension.h")
    good = ["-DTORCH_API_INCLUDE_EXTENSION_H", "-isystem", str(include), "-fPIC", "-O3"]
    made = pch._command({"cxx": "c++", "flags": good, "header": header}, tmp_path, [include])
    assert not isinstance(made, str) and made[1][:3] == ["c++", "-x", "c++-header"]
    refusals = {
        "compiler": ("/tmp/mine/c++", good),
        "include folder": ("c++", [*good, f"-I{tmp_path / 'scratch'}"]),
        "'-fplugin=/tmp/x.so'": ("c++", [*good, "-fplugin=/tmp/x.so"]),
        "'-include'": ("c++", [*good, "-include", "/tmp/x.h"]),
        "'@/tmp/options'": ("c++", [*good, "@/tmp/options"]),
    }
    for why, (cxx, flags) in refusals.items():
        said = pch._command({"cxx": cxx, "flags": flags, "header": header}, tmp_path, [include])
        assert isinstance(said, str) and why in said, (why, said)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    asked = {"cxx": "c++", "flags": [*good, "-fplugin=/tmp/x.so"], "header": header}
    (scratch / pch.ASKED).write_text(json.dumps(asked))
    pch.answer(scratch, tmp_path, trusted=[include])
    assert "-fplugin" in (scratch / pch.REFUSED).read_text()
    assert not list(tmp_path.rglob("*.gch*"))


def test_the_harness_finds_the_toolkit_itself_not_by_importing_torch_s_builder() -> None:
    # torch's builder guesses CUDA_HOME as it is imported (from a wrapper nvcc in
    # /usr/local/bin: /usr/local) and warns on every run without a GPU; the parent never
    # imports it, and trusts the toolkit harness.toolchain finds.
    probe = (
        "import sys\n"
        "from harness import toolchain\n"
        "from harness.measure import pch\n"
        "folders = pch._trusted_folders()\n"
        "print('torch.utils.cpp_extension' in sys.modules)\n"
        "cuda = toolchain.find_cuda_home()\n"
        "print(cuda is None or Path(cuda).resolve() in folders)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", "from pathlib import Path\n" + probe],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == ["False", "True"]
    assert "No CUDA runtime" not in done.stderr
