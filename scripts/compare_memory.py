"""The extra device memory the harness's comparisons need on one huge output (issue 43).

On a GPU, for an output of N float32 elements (5.4e9 by default: a ConvTranspose3d output of
KernelBench's older level-2 files, 21.6 GB), measures what each step that reads outputs
allocates beyond the two outputs themselves (torch.cuda.max_memory_allocated, less what was
allocated before the step), and how long it takes:

  match            mismatch() of two equal outputs (the dtype tolerance, block by block)
  mismatch         mismatch() with three elements off: the report (count, first, errors)
  kernelbench      the KernelBench profile's allclose, with the same three elements off
  accuracy         the float64 rule on those (an exact answer given: 8N bytes, not counted as
                   extra, since a solution's check computes it only for a failing output)
  fingerprint      the held-tensor fingerprint, and the late-work snapshot of an output
  audit            whether zeros or a constant would pass (the audit's trivial answers)

Prints one JSON line per step and writes them all to --json. Needs (2 + 2 for the accuracy step)
x 4N bytes of device memory: about 86 GB at the default N. `--device cpu` measures the same
on the CPU (the process's peak resident memory), at a smaller --elements.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import accuracy
from harness.matching import mismatch
from harness.measure import anticheat, audit, kernelbench

GIB = 1 << 30


def measured(name: str, step: Callable[[], Any], device: torch.device) -> dict[str, Any]:
    """`step` run once: its extra peak memory (GiB), seconds and what it returned, shortened.
    On a GPU, torch's own count of what it allocated; on a CPU, the process's peak resident
    memory (VmHWM, reset before the step) over what it held before."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    else:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
        before = _status_kib("VmRSS") * 1024
    started = time.perf_counter()
    answer = step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        extra = torch.cuda.max_memory_allocated(device) - before
    else:
        extra = _status_kib("VmHWM") * 1024 - before
    seconds = time.perf_counter() - started
    shown = answer if answer is None or isinstance(answer, (bool, int, float)) else str(answer)
    line = {"step": name, "extra_gib": round(extra / GIB, 3), "seconds": round(seconds, 2)}
    line["answer"] = shown if not isinstance(shown, str) else shown[:300]
    print(json.dumps(line), flush=True)
    return line


def _status_kib(key: str) -> int:
    """A figure of /proc/self/status, in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=float, default=5.4e9)
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--device", default="cuda", help="cuda (default), or cpu (Linux)")
    args = parser.parse_args()
    device = torch.device(args.device)
    count = int(args.elements)
    expected = torch.empty(count, dtype=torch.float32, device=device)
    for start in range(0, count, 1 << 28):  # drawn in parts: no 2x temporary
        expected[start : start + (1 << 28)].normal_()
    actual = expected.clone()
    print(json.dumps({"elements": count, "output_gib": round(4 * count / GIB, 2)}), flush=True)
    lines = [measured("match", lambda: mismatch(expected, actual), device)]
    for at in (7, count // 2, count - 1):
        actual[at] += 1.0
    lines.append(measured("mismatch", lambda: mismatch(expected, actual), device))
    lines.append(measured("kernelbench", lambda: kernelbench.mismatch(expected, actual), device))
    wide = accuracy.Wide(expected.to(torch.float64))
    lines.append(
        measured("accuracy", lambda: mismatch(expected, actual, exact=lambda: wide), device)
    )
    lines.append(measured("fingerprint", lambda: anticheat.fingerprint(actual), device))
    lines.append(
        measured("late_work_snapshot", lambda: anticheat.element_fingerprint(actual), device)
    )
    lines.append(
        measured(
            "audit",
            lambda: (
                mismatch(expected, audit.zeros(expected)) is None,
                mismatch(expected, audit.expanded(audit.constant(expected), expected)) is None,
            ),
            device,
        )
    )
    args.json.write_text("\n".join(json.dumps(line) for line in lines) + "\n")


if __name__ == "__main__":
    main()
