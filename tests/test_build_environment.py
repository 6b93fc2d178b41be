"""The build environment: finding CUDA, picking architectures, keying build folders."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import settings, toolchain


def fake_toolkit(root: Path) -> Path:
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (root / "lib64").mkdir()
    (root / "lib64" / "libcudart.so").write_text("")
    return root


def test_cuda_home_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = fake_toolkit(tmp_path / "cuda")
    monkeypatch.setenv("CUDA_HOME", str(home))
    assert toolchain.find_cuda_home() == str(home)


def test_a_wrapper_nvcc_on_path_is_not_taken_for_the_toolkit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrapper_dir = tmp_path / "usr" / "local" / "bin"
    wrapper_dir.mkdir(parents=True)
    wrapper = wrapper_dir / "nvcc"
    wrapper.write_text('#!/bin/sh\nexec /somewhere/else/nvcc "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", f"{wrapper_dir}{os.pathsep}{os.environ['PATH']}")
    found = toolchain.find_cuda_home()
    assert found != str(tmp_path / "usr" / "local")  # what torch itself would guess
    assert found is None or (Path(found) / "bin" / "nvcc").is_file()


def test_arch_list_prefers_flag_then_gpu_then_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    assert toolchain.arch_list((9, 0), "8.0") == "8.0"
    assert toolchain.arch_list((8, 6), None) == "8.6"
    assert toolchain.arch_list(None, None) == toolchain.DEFAULT_ARCH
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "7.5")
    assert toolchain.arch_list(None, None) == "7.5"
    assert toolchain.arch_list((9, 0), None) == "9.0"  # the GPU present wins over the env


def test_build_folders_are_keyed_by_content(tmp_path: Path) -> None:
    one, two = tmp_path / "one.py", tmp_path / "two.py"
    same_extension = "load_inline(name='ext', cpp_sources='{}')\n"
    one.write_text(same_extension)
    two.write_text(same_extension + "# another solution\n")

    def folder(path: Path, arch: str = "9.0") -> Path:
        return toolchain.build_folder(tmp_path, "p", path, arch)

    assert folder(one) != folder(two)  # the same extension name never shares a folder
    assert folder(one) == folder(one)  # an unchanged solution finds its old build
    before = folder(one)
    (tmp_path / "kernel.cu").write_text("__global__ void k() {}\n")
    assert folder(one) != before  # a source beside it counts too
    assert folder(one, "8.0") != folder(one, "9.0")  # a .cu beside it: built per architecture


def test_the_same_code_under_another_name_or_a_cpp_build_for_another_arch_shares_a_folder(
    tmp_path: Path,
) -> None:
    cpp = "load_inline(name='ext', cpp_sources='int f() { return 1; }')\n"
    cuda = "load_inline(name='ext', cpp_sources='', cuda_sources='__global__ void k() {}')\n"
    for name, text in (("mine.py", cpp), ("copy_of_mine.py", cpp), ("gpu.py", cuda)):
        (tmp_path / name).write_text(text)

    def folder(name: str, arch: str = "9.0") -> Path:
        return toolchain.build_folder(tmp_path / "cache", "p", tmp_path / name, arch)

    assert folder("mine.py") == folder("copy_of_mine.py")  # a file's name builds nothing
    assert folder("mine.py", "8.0") == folder("mine.py", "9.0")  # no CUDA: no architecture
    assert folder("gpu.py", "8.0") != folder("gpu.py", "9.0")
    assert folder("gpu.py") != folder("mine.py")


def test_a_changed_compiler_or_torch_gets_a_new_build_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    solution = tmp_path / "s.py"
    solution.write_text("load_inline(name='ext', cpp_sources='{}')\n")

    def folder() -> Path:
        return toolchain.build_folder(tmp_path, "p", solution, "9.0")

    before = folder()
    monkeypatch.setattr(toolchain, "compilers", lambda: "c++ 99.0|nvcc 99.0")
    changed_compiler = folder()
    assert changed_compiler != before
    monkeypatch.setattr("torch.__version__", "0.0.0")
    assert folder() not in (before, changed_compiler)


def test_the_compilers_read_as_their_version_lines_or_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cxx = tmp_path / "cxx"
    cxx.write_text("#!/bin/sh\necho 'g++ (Test) 1.2.3'\necho 'Copyright'\n")
    cxx.chmod(0o755)
    monkeypatch.setenv("CXX", str(cxx))
    monkeypatch.setenv("CUDA_HOME", str(fake_toolkit(tmp_path / "cuda")))  # its nvcc says nothing
    toolchain.compilers.cache_clear()
    try:
        assert toolchain.compilers() == "g++ (Test) 1.2.3|none"
        monkeypatch.setenv("CXX", str(tmp_path / "missing"))
        toolchain.compilers.cache_clear()
        assert toolchain.compilers().startswith("none|")
    finally:
        toolchain.compilers.cache_clear()


def test_the_build_cache_can_live_outside_the_clone(tmp_path: Path) -> None:
    code = "from harness.settings import Places; print(Places().build_dir)"
    environment = {**os.environ, "HARNESS_BUILD_DIR": str(tmp_path / "builds")}
    shown = subprocess.run(
        [sys.executable, "-c", code],
        env=environment,
        cwd=Path(settings.__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert shown == str(tmp_path / "builds")


def test_library_headers_are_added_only_where_the_toolkit_lacks_them(tmp_path: Path) -> None:
    bare = fake_toolkit(tmp_path / "bare")
    (bare / "include").mkdir()
    found = toolchain.missing_library_headers(str(bare))
    assert found is None or (Path(found) / "cusparse.h").is_file()
    (bare / "include" / "cusparse.h").write_text("")
    assert toolchain.missing_library_headers(str(bare)) is None


def test_use_build_cache_points_the_builder_at_the_solutions_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The worker and the GPU-machine scripts share this, so their builds land in one cache.
    for name in ("TORCH_EXTENSIONS_DIR", "TORCH_CUDA_ARCH_LIST", "CPATH", "PATH", "CUDA_HOME"):
        monkeypatch.setenv(name, os.environ.get(name, ""))
    solution = tmp_path / "sol.py"
    solution.write_text("x = 1\n")
    folder = toolchain.use_build_cache(tmp_path / "cache", "p", solution, "9.0")
    expected = toolchain.build_folder(tmp_path / "cache", "p", solution, "9.0")
    assert folder == expected and folder.is_dir()
    assert os.environ["TORCH_EXTENSIONS_DIR"] == str(folder)
    assert os.environ["TORCH_CUDA_ARCH_LIST"] == "9.0"
