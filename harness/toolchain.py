"""The build side of a run: the CUDA toolkit, target architectures and per-solution build folders.

Solutions build themselves with torch's JIT extension builder (`load_inline` or `load`, through
ninja). The harness only prepares the environment that builder reads:

* CUDA_HOME, because torch guesses it from the `nvcc` on PATH, which is wrong where that `nvcc`
  is a wrapper script (the link then fails on `-lcudart`);
* TORCH_CUDA_ARCH_LIST, so code is built for the GPU that is present and not for every
  architecture torch knows (without a GPU: a default, overridable with --arch);
* TORCH_EXTENSIONS_DIR, one folder per solution keyed by a hash of its sources and of the
  toolchain, so two solutions that reuse an extension name never collide, and an unchanged
  solution is not rebuilt.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

DEFAULT_ARCH = "9.0"  # the H200 this project is measured on; used only when no GPU is present
SOURCE_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".c", ".h", ".hpp")


def _is_cuda_home(path: str) -> bool:
    root = Path(path)
    has_runtime = any((root / lib / "libcudart.so").exists() for lib in ("lib64", "lib"))
    return (root / "bin" / "nvcc").is_file() and has_runtime


def find_cuda_home() -> str | None:
    """The CUDA toolkit folder (holding bin/nvcc and lib64/libcudart.so), or None."""
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(str(Path(os.path.realpath(nvcc)).parent.parent))
    candidates.append("/usr/local/cuda")
    candidates.extend(sorted(glob.glob("/usr/local/cuda-*"), reverse=True))
    return next((c for c in candidates if c and _is_cuda_home(c)), None)


def arch_list(capability: tuple[int, int] | None, override: str | None) -> str:
    """TORCH_CUDA_ARCH_LIST to build with: --arch, else the GPU present, else env or default."""
    if override:
        return override
    if capability is not None:
        return f"{capability[0]}.{capability[1]}"
    return os.environ.get("TORCH_CUDA_ARCH_LIST") or DEFAULT_ARCH


def source_hash(solution: Path) -> str:
    """sha256 of a solution file and of the C++/CUDA sources beside it (which it may `load`)."""
    digest = hashlib.sha256()
    siblings = sorted(p for p in solution.parent.iterdir() if p.suffix in SOURCE_SUFFIXES)
    for path in [solution, *siblings]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def build_folder(cache_dir: Path, problem: str, solution: Path, arch: str) -> Path:
    """The solution's build folder: keyed by what its build is made of (its code and the
    sources beside it, not its file's name) and the toolchain that builds it, the architecture
    only where its code has CUDA in it; so a copy under another name, or a C++ solution built
    for another --arch, finds the same build."""
    import torch  # deferred: importing torch costs seconds and most callers already have

    content, cuda = _build_content(solution)
    target = arch if cuda else "no-cuda"
    toolchain = f"{torch.__version__}|{torch.version.cuda}|{sys.version_info[:2]}|{target}"
    key = hashlib.sha256(f"{content}|{toolchain}|{compilers()}".encode()).hexdigest()[:16]
    return cache_dir / problem / f"build-{key}"


CUDA_TEXT = re.compile(rb"cuda|\.cuh?\b", re.IGNORECASE)  # a hint of CUDA code, or a .cu file


def _build_content(solution: Path) -> tuple[str, bool]:
    """sha256 of the solution's code and of each source beside it (by name: it loads them so),
    and whether any of it may compile CUDA (a mention of CUDA or of a .cu file: when in doubt,
    yes, so that a CUDA build is never shared across architectures)."""
    digest = hashlib.sha256()
    code = solution.read_bytes()
    digest.update(code + b"\0")
    cuda = bool(CUDA_TEXT.search(code))
    for path in sorted(p for p in solution.parent.iterdir() if p.suffix in SOURCE_SUFFIXES):
        text = path.read_bytes()
        digest.update(path.name.encode() + b"\0" + text + b"\0")
        cuda = cuda or path.suffix in (".cu", ".cuh") or bool(CUDA_TEXT.search(text))
    return digest.hexdigest(), cuda


@functools.cache
def compilers() -> str:
    """What compiles an extension here: the first line of `c++ --version` ($CXX where set, as
    torch's builder uses it) and the last of `nvcc --version` (the toolkit's, where found), so a
    changed compiler gets a new build folder. A compiler that is missing reads as 'none'."""
    found = find_cuda_home()
    nvcc = str(Path(found) / "bin" / "nvcc") if found else "nvcc"
    cxx = _version_line([os.environ.get("CXX") or "c++", "--version"], first=True)
    return f"{cxx}|{_version_line([nvcc, '--version'], first=False)}"


def _version_line(command: list[str], first: bool) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "none"
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return (lines[0] if first else lines[-1]) if lines and done.returncode == 0 else "none"


def use_build_cache(cache_dir: Path, problem: str, solution: Path, arch: str) -> Path:
    """Prepare the environment to build `solution` in its folder of the cache; return it."""
    folder = build_folder(cache_dir, problem, solution, arch)
    prepare_environment(folder, arch)
    return folder


def prepare_environment(build_dir: Path, arch: str) -> None:
    """Point torch's extension builder and Triton's cache at the build folder, toolkit and arch."""
    build_dir.mkdir(parents=True, exist_ok=True)
    os.environ["TORCH_EXTENSIONS_DIR"] = str(build_dir)
    os.environ["TORCH_CUDA_ARCH_LIST"] = arch
    os.environ["TRITON_CACHE_DIR"] = str(build_dir / "triton")  # harness.measure.triton_builds
    cuda_home = find_cuda_home()
    if cuda_home:
        os.environ["CUDA_HOME"] = cuda_home
        builder = sys.modules.get("torch.utils.cpp_extension")
        if builder is not None:  # imported already: it read CUDA_HOME at import, so set it there
            builder.CUDA_HOME = cuda_home  # type: ignore[attr-defined]
        os.environ["PATH"] = f"{cuda_home}/bin{os.pathsep}{os.environ.get('PATH', '')}"
        extra = missing_library_headers(cuda_home)
        if extra:  # CPATH comes after every -I, so the toolkit's own headers still win
            os.environ["CPATH"] = os.pathsep.join(filter(None, [os.environ.get("CPATH"), extra]))


def missing_library_headers(cuda_home: str) -> str | None:
    """An include folder with cuBLAS/cuSPARSE headers, where the toolkit itself lacks them.

    A bare toolkit may ship without the math libraries' headers, yet ATen/cuda/CUDAContext.h,
    which most solutions include, includes cusparse.h and cublas_v2.h. NVIDIA's pip wheels
    that torch installs carry them.
    """
    if (Path(cuda_home) / "include" / "cusparse.h").exists():
        return None
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for include in sorted(Path(root).glob("*/include"), reverse=True):
            if (include / "cusparse.h").exists():
                return str(include)
    return None
