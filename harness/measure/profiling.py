"""Check, with torch's profiler, that a solution does work of its own and is not PyTorch's.

One call of the reference and one of the solution are profiled. On a GPU, the solution must
launch at least one kernel of its own: a kernel not in PyTorch's namespaces (`at::`, `c10::`)
whose name appears in the solution's own source (its .py file or the .cu/.cpp/.cuh/.h files
beside it, which is where load_inline and load take their code from). A solution that launches
only PyTorch's kernels is rejected ("no_own_kernel"). Wherever it runs, a solution calling one of
the operators the reference calls at its top level (`aten::multilabel_margin_loss`, say) gets a
warning, as does a CPU solution that built no extension. The names are heuristics: a warning is a
prompt to read the code, and the rule only rejects what is plainly PyTorch's own work.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from harness.measure import anticheat

PYTORCH_KERNELS = ("at::", "c10::")
SOURCE_SUFFIXES = (".py", ".cu", ".cuh", ".cpp", ".cc", ".h", ".hpp")
# Top-level operators that move or describe data rather than compute the problem's function.
UTILITY_OPS = frozenset(
    f"aten::{name}"
    for name in (
        "empty",
        "empty_like",
        "empty_strided",
        "zeros",
        "zeros_like",
        "ones",
        "ones_like",
        "full",
        "full_like",
        "to",
        "_to_copy",
        "copy_",
        "clone",
        "contiguous",
        "view",
        "reshape",
        "_reshape_alias",
        "as_strided",
        "expand",
        "expand_as",
        "select",
        "slice",
        "unsqueeze",
        "squeeze",
        "permute",
        "transpose",
        "t",
        "flatten",
        "item",
        "_local_scalar_dense",
        "resize_",
        "fill_",
        "zero_",
        "detach",
        "alias",
        "lift_fresh",
        "unbind",
        "split",
        "chunk",
        "narrow",
        "numel",
        "size",
        "stride",
        "is_nonzero",
        "result_type",
    )
)


@dataclass(frozen=True)
class Profile:
    """What one call did: the aten operators it called at its top level, and its kernels."""

    ops: frozenset[str]
    kernels: tuple[str, ...]


def profile(call: Callable[[], Any], device: torch.device) -> Profile:
    """Profile one call of `call` (with the device waited for)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with torch_profile(activities=activities) as recorded, torch.no_grad():
        call()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    ops, kernels = set(), []
    for event in recorded.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            kernels.append(event.name)
        elif event.name.startswith("aten::") and not _inside_aten(event):
            ops.add(event.name)
    return Profile(frozenset(ops), tuple(kernels))


def _inside_aten(event: Any) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return True
        parent = parent.cpu_parent
    return False


def judge(
    reference: Profile, solution: Profile, device: torch.device, source: Path, built: bool
) -> list[str]:
    """Warnings about the solution's own work; raises the "no_own_kernel" rejection."""
    warnings = []
    shared = sorted((reference.ops & solution.ops) - UTILITY_OPS)
    if shared:
        warnings.append(f"calls the reference's own operator(s) {', '.join(shared)}")
    if device.type == "cuda":
        own = own_kernels(solution.kernels, source_text(source))
        if not own:
            shown = ", ".join(sorted({kernel_name(k) for k in solution.kernels})[:3]) or "none"
            raise anticheat.reject(
                "no_own_kernel",
                f"launched no kernel of its own (its kernels: {shown}); the harness times "
                "your kernels, not PyTorch's",
            )
    elif not built:
        warnings.append("built no extension: its work is PyTorch's own")
    return warnings


def own_kernels(kernels: tuple[str, ...], source: str) -> list[str]:
    """The kernels not in PyTorch's namespaces whose names appear in `source`."""
    found = []
    for kernel in kernels:
        if any(kernel.removeprefix("void ").startswith(p) for p in PYTORCH_KERNELS):
            continue
        name = kernel_name(kernel)
        if name and re.search(rf"\b{re.escape(name)}\b", source):
            found.append(name)
    return found


def kernel_name(kernel: str) -> str:
    """'void ns::scale_kernel<256>(float const*, ...)' -> 'scale_kernel'."""
    text = kernel.replace("(anonymous namespace)::", "").removeprefix("void ")
    text = text.split("(", 1)[0].split("<", 1)[0].strip()
    return text.rsplit("::", 1)[-1].split()[-1] if text else ""


def source_text(solution: Path) -> str:
    """The solution file and the source files beside it, as one text."""
    parts = [solution.read_text(errors="replace")]
    for path in sorted(solution.parent.iterdir()):
        if path.suffix in SOURCE_SUFFIXES[1:] and path.is_file():
            parts.append(path.read_text(errors="replace"))
    return "\n".join(parts)
