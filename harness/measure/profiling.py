"""Check, with torch's profiler, that a solution does work of its own and is not PyTorch's.

One call of the reference and one of the solution are profiled. On a GPU, the solution must
launch at least one kernel of its own: a kernel not in PyTorch's namespaces (`at::`, `c10::`),
not launched by the reference too (cuBLAS's gemm is the library's, whatever the source says),
whose name appears in the solution's own source (its .py file or the .cu/.cpp/.cuh/.h files
beside it, which is where load_inline and load take their code from). A solution that launches
none is rejected ("no_own_kernel").

Each kernel comes with its GPU time, so the solution's device time splits into shares (`Shares`):
its own kernels', and that of the kernels the reference launches too (by full name). A fig leaf,
a small kernel of its own beside PyTorch's whole computation, is rejected ("fig_leaf") when both
  - it launches every kernel the reference launches, as many times (by full name, template
    arguments and all): it re-ran the reference whole, so its answer may be PyTorch's, and
  - its own kernels do less than FIG_LEAF_SHARE (half) of its device time.
The first condition tells a fig leaf from a KernelBench level-2 solution that keeps the
reference's cuBLAS gemm and fuses the rest into a kernel of its own: that one replaces some of
the reference's kernels, so it stays `ok` however small its own share (a big gemm and a light
epilogue give a few percent). The second spares an honest solution that happens to launch the
reference's kernels as well, such as a partial reduction of its own finished by the same
`torch.sum` the reference calls: its own kernel reads the input, the sum reads only the
partials, so its own share is large. The bar is half, not a few percent, because at the small
shapes a problem's first case often has, every kernel takes about the launch floor (1-2 us),
whatever its work: a fig leaf beside a reference of k kernels then shows an own share of about
1/(k+1), a third on the toy problem (a one-kernel reference at such a size puts it at the bar;
where the reference's kernel does real work the leaf is a sliver). What profiling cannot tell
apart: a fig leaf that computes the answer with other PyTorch operators than the reference's
launches other kernels, so it is not rejected; it gets a warning where PyTorch's own kernels
(`at::`, `c10::`) do most of its device time, and its share is in the CSV.

No device activity is profiled before a timing: torch's profiler leaves CUPTI attached to the
process when a profile of the device ends, and every later launch pays for it, even with
CUPTI's teardown asked for (TEARDOWN_CUPTI, set by every profile), where a second profile
begins before the first's teardown is done (docs/anticheat.md has the figures). So the warm-up
before the integrity snapshot profiles the host only, and the profile of each side runs after
the timing (harness.measure.worker), the solution's first; a profile that saw no device
activity at all is taken again (`seen_profile`: one begun during a teardown can see none).

Wherever it runs, a solution calling one of the operators the reference calls at its top level
(`aten::multilabel_margin_loss`, say) gets a warning, as does a CPU solution that built no
extension. The names are heuristics: a warning is a prompt to read the code, and the rules only
reject what is plainly PyTorch's own work.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch

from harness import verdicts
from harness.loading import Problem, Seeds, make_inputs, replicate_all
from harness.measure import anticheat
from harness.measure.checking import build_models, describe_error, guard
from harness.verdicts import Verdict

PYTORCH_KERNELS = ("at::", "c10::")
RUNTIME_EVENTS = ("Memcpy", "Memset")  # the profiler's names for the CUDA runtime's copies
# What torch's profiler library (kineto) writes to stderr and is no fault: once per process, at
# its first trace on a machine with no NVIDIA driver (code 35); and, in torch 2.14, a line at the
# start and the end of every trace.
KNOWN_NOISE = ("gpuGetDeviceCount failed with code", "SyncActivityProfilerHandler.cpp")
# What torch's profiler warns (torch 2.11) when one process traces twice: true, and meant for
# one profiler object traced in cycles; each call here makes its own.
CYCLE_WARNING = "Warning: Profiler clears events at the end of each cycle"
FIG_LEAF_SHARE = 0.5  # a solution re-running the reference whole must do this much itself
TEARDOWN = "TEARDOWN_CUPTI"  # "1": CUPTI detached when a profile ends (module doc)
PROFILE_TRIES, PROFILE_PAUSE_S = 3, 0.5  # a profile that saw no device activity (seen_profile)
SOURCE_SUFFIXES = (".py", ".cu", ".cuh", ".cpp", ".cc", ".h", ".hpp")
# Top-level operators that move or describe data rather than compute the problem's function.
_UTILITY_NAMES = (
    "empty empty_like empty_strided zeros zeros_like ones ones_like full full_like to "
    "_to_copy copy_ clone contiguous view reshape _reshape_alias as_strided expand expand_as "
    "select slice unsqueeze squeeze permute transpose t flatten item _local_scalar_dense "
    "resize_ fill_ zero_ detach alias lift_fresh unbind split chunk narrow numel size stride "
    "is_nonzero result_type"
)
UTILITY_OPS = frozenset(f"aten::{name}" for name in _UTILITY_NAMES.split())


class Kernel(NamedTuple):
    """A kernel (or copy, or memset) that a call ran on the device, and its GPU time."""

    name: str  # as the profiler gives it: 'void ns::scale_kernel<256>(float const*, ...)'
    us: float | None = None  # None where the profiler gave no duration


@dataclass(frozen=True)
class Profile:
    """What one call did: the aten operators it called at its top level, and its kernels."""

    ops: frozenset[str]
    kernels: tuple[Kernel, ...]


@dataclass(frozen=True)
class Shares:
    """Shares of a solution's device time, from 0 to 1: in its own kernels, in the kernels the
    reference launches too, and in PyTorch's own (`at::`, `c10::`; the reference's among them).
    Each is None where it cannot be told: no kernels (a CPU), or no durations."""

    own: float | None = None
    reference: float | None = None
    pytorch: float | None = None


class OwnWork(NamedTuple):
    """What `own_work` found: the shares of the solution's device time, warnings, and the
    rejection it earned, if any."""

    shares: Shares
    warnings: list[str]
    rejection: Verdict | None = None


def profile(call: Callable[[], Any], device: torch.device) -> Profile:
    """Profile one call of `call` (with the device waited for); CUPTI is torn down after it
    (the module doc says why)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    os.environ[TEARDOWN] = "1"  # read by the profiler's library when the profile ends
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with _without_known_noise(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=CYCLE_WARNING, category=UserWarning)
        with torch_profile(activities=activities) as recorded, torch.no_grad():
            call()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
    ops, kernels = set(), []
    for event in recorded.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            kernels.append(Kernel(event.name, device_us(event)))
        elif event.name.startswith("aten::") and not _inside_aten(event):
            ops.add(event.name)
    return Profile(frozenset(ops), tuple(kernels))


def own_work(
    problem: Problem,
    model_new: type,
    device: torch.device,
    seeds: Seeds,
    path: Path,
    built: bool,
) -> OwnWork:
    """Profile one call of each side on the first case: the shares of the solution's device
    time, and warnings or the "no_own_kernel" or "fig_leaf" rejection (`judge`; `path` is the
    solution's file, `built` whether it built an extension). A profiler that fails here only
    costs the check, with a warning."""
    case = problem.cases[0]
    reference, solution = build_models(problem, model_new, case, seeds.case(0), device)
    inputs = guard(
        verdicts.PROBLEM_ERROR, "get_inputs", make_inputs, case, seeds.trial(0, 1), device
    )

    def profiled(model: Any) -> Profile:
        own = replicate_all(inputs, device)  # copied outside the profile: only the call counts
        return seen_profile(lambda: model(*own), device)

    try:  # the solution first: the first profile of a process sees the device surely
        got = profiled(solution)
        expected = profiled(reference)
    except Exception as err:
        traceback.print_exc()
        return OwnWork(Shares(), [f"profiler check skipped ({describe_error(err)})"])
    own = shares(expected, got, source_text(path))
    try:
        return OwnWork(own, judge(expected, got, device, path, built))
    except Verdict as verdict:  # a rejected row keeps the shares
        return OwnWork(own, [], verdict)


def seen_profile(
    call: Callable[[], Any], device: torch.device, profiler: Callable[..., Profile] | None = None
) -> Profile:
    """`profiler(call, device)` (`profile` unless given), again up to PROFILE_TRIES times in all,
    a pause between, while on a GPU it saw no device activity at all: a profile that starts
    while the last one's CUPTI teardown is under way sees none (an honest one-kernel solution
    was once rejected as launching no kernel: docs/anticheat.md).
    A call that launches nothing shows nothing every time."""
    profiler = profiler or profile
    seen = profiler(call, device)
    for _ in range(PROFILE_TRIES - 1):
        if device.type != "cuda" or seen.kernels:
            break
        time.sleep(PROFILE_PAUSE_S)
        seen = profiler(call, device)
    return seen


def warm_up(device: torch.device) -> None:
    """Profile nothing once, on the host only: the profiler's first use rebinds some of
    torch's names, and must come before the integrity snapshot. Not the device's activities:
    those attach CUPTI, and this runs before the timing, which must find the process as a
    plain one (the module doc; the profile of each side runs after the timing). What the
    profiler's library writes meanwhile passes on to stderr but KNOWN_NOISE."""
    profile(lambda: None, torch.device("cpu"))


@contextmanager
def _without_known_noise() -> Iterator[None]:
    """Hold what is written to file descriptor 2 (C++ code writes there, not to sys.stderr)
    during the block, then write it on without the lines holding KNOWN_NOISE."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            lines = held.read().splitlines(keepends=True)
            noise = [known.encode() for known in KNOWN_NOISE]
            os.write(2, b"".join(ln for ln in lines if not any(n in ln for n in noise)))


def device_us(event: Any) -> float | None:
    """A device event's GPU time in microseconds: its `time_range`, which torch's profiler
    events have had from torch 1 to 2.14; None where it is missing."""
    try:
        return float(event.time_range.elapsed_us())
    except (AttributeError, TypeError, ValueError):
        return None


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
    """Warnings about the solution's own work; raises the "no_own_kernel" and "fig_leaf"
    rejections."""
    warnings = []
    shared = sorted((reference.ops & solution.ops) - UTILITY_OPS)
    if shared:
        warnings.append(f"calls the reference's own operator(s) {', '.join(shared)}")
    if device.type == "cuda":
        text = source_text(source)
        if not own_kernels(reference, solution, text):
            names = {kernel_name(k.name) for k in solution.kernels}
            shown = ", ".join(sorted(names)[:3]) or "none"
            raise anticheat.reject(
                "no_own_kernel",
                f"launched no kernel of its own (its kernels: {shown}); the harness times "
                "your kernels, not PyTorch's",
            )
        warnings += fig_leaf(reference, solution, text)
    elif not built:
        warnings.append("built no extension: its work is PyTorch's own")
    return warnings


def fig_leaf(reference: Profile, solution: Profile, source: str) -> list[str]:
    """Raises the "fig_leaf" rejection for a solution that re-runs the reference whole while
    its own kernels do less than FIG_LEAF_SHARE of its device time (the module's docstring says
    why); a warning where that cannot be weighed, or where PyTorch's kernels do most of it."""
    share = shares(reference, solution, source)
    if reruns_reference(reference, solution):
        if share.own is None:
            return [
                "launches every kernel the reference launches, besides its own; "
                "no kernel durations to weigh them"
            ]
        if share.own < FIG_LEAF_SHARE:
            mine = ", ".join(sorted(set(own_kernels(reference, solution, source))))
            raise anticheat.reject(
                "fig_leaf",
                f"launches every kernel the reference launches ({len(reference.kernels)} launches, "
                f"{_percent(share.reference)} of its device time) besides its own ({mine}, "
                f"{_percent(share.own)}): the answer is PyTorch's",
            )
    elif share.pytorch is not None and share.pytorch > FIG_LEAF_SHARE:
        return [
            f"PyTorch's own kernels do {_percent(share.pytorch)} of its device time, its own "
            f"{_percent(share.own)}"
        ]
    return []


def shares(reference: Profile, solution: Profile, source: str) -> Shares:
    """How the solution's device time splits (`Shares`); all None where it launched nothing
    or a kernel has no duration."""
    durations = [k.us for k in solution.kernels]
    total = sum(us for us in durations if us is not None)
    if None in durations or total <= 0:
        return Shares()
    theirs = {k.name for k in reference.kernels}

    def share(picked: Callable[[Kernel], bool]) -> float:
        return sum(k.us or 0.0 for k in solution.kernels if picked(k)) / total

    return Shares(
        own=share(lambda k: _is_own(k.name, theirs, source)),
        reference=share(lambda k: k.name in theirs),
        pytorch=share(lambda k: _is_pytorch(k.name)),
    )


def reruns_reference(reference: Profile, solution: Profile) -> bool:
    """Whether the solution launched every kernel the reference launched, at least as many
    times each (by full name); never for a reference that launched none."""
    theirs = Counter(k.name for k in reference.kernels)
    mine = Counter(k.name for k in solution.kernels)
    return bool(theirs) and all(mine[name] >= count for name, count in theirs.items())


def own_kernels(reference: Profile, solution: Profile, source: str) -> list[str]:
    """The names of the solution's kernels that are its own: not in PyTorch's namespaces, not
    a copy or memset of the CUDA runtime, not launched by the reference too, and named in
    `source`."""
    theirs = {k.name for k in reference.kernels}
    return [kernel_name(k.name) for k in solution.kernels if _is_own(k.name, theirs, source)]


def _is_own(kernel: str, theirs: set[str], source: str) -> bool:
    if _is_pytorch(kernel) or kernel.startswith(RUNTIME_EVENTS) or kernel in theirs:
        return False
    name = kernel_name(kernel)
    return bool(name) and re.search(rf"\b{re.escape(name)}\b", source) is not None


def _is_pytorch(kernel: str) -> bool:
    return any(kernel.removeprefix("void ").startswith(p) for p in PYTORCH_KERNELS)


def _percent(share: float | None) -> str:
    return "?" if share is None else f"{100 * share:.1f}%"


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
