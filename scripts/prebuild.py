"""Build every shipped solution into the harness's build cache, several at once.

run.py builds solutions one after another (a cold CUDA build takes about a minute); on a
machine with many cores, running this first makes `run.py --all` find every build done.

  usage: python scripts/prebuild.py [--jobs 8]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BUILD_ONE = """
import sys
from pathlib import Path
import torch
sys.path.insert(0, {root!r})
from harness.loading import import_file
from harness.toolchain import arch_list, use_build_cache
path = Path({path!r})
capability = torch.cuda.get_device_capability() if torch.cuda.is_available() else None
arch = arch_list(capability, None)
use_build_cache(Path({root!r}) / ".cache" / "builds", path.parent.name, path, arch)
import_file(path)
"""


def build(path: Path) -> str:
    start = time.monotonic()
    code = BUILD_ONE.format(root=str(ROOT), path=str(path))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    seconds = time.monotonic() - start
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return f"FAILED {path.relative_to(ROOT)} in {seconds:.0f} s: {last}"
    return f"built {path.relative_to(ROOT)} in {seconds:.0f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=8)
    args = parser.parse_args()
    paths = sorted(p for p in (ROOT / "solutions").glob("*/*.py") if not p.name.startswith("_"))
    with ThreadPoolExecutor(args.jobs) as pool:
        lines = list(pool.map(build, paths))
    print("\n".join(lines))
    return 1 if any(line.startswith("FAILED") for line in lines) else 0


if __name__ == "__main__":
    sys.exit(main())
