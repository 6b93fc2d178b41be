"""How long a spare worker takes to import and to warm up on a device (issue 44, docs/scale.md).

    python scripts/spare_probe.py [--device cuda:0] [--counts 1 6]

For each count N: N spare workers (harness.run.isolate.Spare, outside the sandbox) started at
once; each one's seconds from its start to `Imported` (torch and the harness imported), then,
told to warm up once all are imported, to `Warmed` (CUDA started on the device, the profiler
once). Prints one line per count: the medians and the largest of each. Nothing else should run
on the host meanwhile.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.run.isolate import Spare

POLL_S = 0.005


def one_count(count: int, device: str) -> tuple[list[float], list[float]]:
    """(seconds to Imported, seconds from Warm to Warmed), one of each per spare."""
    began = time.monotonic()
    spares = [Spare() for _ in range(count)]
    imported: dict[int, float] = {}
    while len(imported) < count:
        for index, spare in enumerate(spares):
            if index not in imported and spare.ready():
                imported[index] = time.monotonic() - began
        time.sleep(POLL_S)
    told = time.monotonic()
    for spare in spares:
        spare.warm(device)
    warmed: dict[int, float] = {}
    while len(warmed) < count:
        for index, spare in enumerate(spares):
            spare.ready()  # reads Warmed too
            if index not in warmed and spare.warmed:
                warmed[index] = time.monotonic() - told
        time.sleep(POLL_S)
    for spare in spares:
        spare.close()
    return list(imported.values()), list(warmed.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda:0", help="where the spares warm up")
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 6], help="spares at once")
    args = parser.parse_args()
    for count in args.counts:
        imports, warms = one_count(count, args.device)
        print(
            f"{count} spare(s) at once: import median {statistics.median(imports):.2f} s "
            f"(max {max(imports):.2f}), warm-up median {statistics.median(warms):.2f} s "
            f"(max {max(warms):.2f})",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
