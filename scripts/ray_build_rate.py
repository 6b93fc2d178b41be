"""Builds an hour on a local Ray cluster of 1, 2, 3... CPU nodes (issue 44, docs/scale.md).

    python scripts/ray_build_rate.py SUITE [--nodes 1 2 3] [--jobs N]

SUITE holds problems/ and solutions/ (scripts/make_suite.py). For each node count N: a Ray
cluster on this machine (`ray.cluster_utils.Cluster`: a head and N nodes of one CPU each, so
that N builds run at once; the judging actor, which a --build-only run starts but never uses,
takes the head's one CPU), then `run.py --build-only --compile-cuda --ray ADDRESS` over every
solution of SUITE into a fresh build folder (the precompiled header made there too), and the
run's wall time, as builds an hour. The nodes share this machine's cores: where N exceeds
them, more nodes cannot add builds. Needs Ray (requirements-ray.txt); prints one line per N.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
NODE_MEMORY = 80 << 20  # each node's object store: builds of a few MB pass through it
BUILT = re.compile(r"build only: (\d+) of (\d+) built in")


def one_count(suite: Path, nodes: int, jobs: int | None) -> tuple[int, int, float]:
    """(built, given, seconds) of one --build-only run on a cluster of `nodes` CPU nodes."""
    from ray.cluster_utils import Cluster

    root = Path(tempfile.mkdtemp(prefix="rb-", dir="/tmp"))  # Ray's socket paths must be short
    os.environ["RAY_TMPDIR"] = str(root)
    head: dict[str, Any] = {"num_cpus": 1, "num_gpus": 0, "include_dashboard": False}
    head["object_store_memory"] = NODE_MEMORY
    cluster = Cluster(initialize_head=True, head_node_args=head)
    try:
        for _ in range(nodes):
            cluster.add_node(num_cpus=1, num_gpus=0, object_store_memory=NODE_MEMORY)
        cluster.wait_for_nodes()
        command = [sys.executable, str(REPO / "run.py"), "--problems", str(suite / "problems")]
        command += ["--solutions", str(suite / "solutions"), "--build-only", "--compile-cuda"]
        command += ["--device", "cpu", "--ray", cluster.address, "--sandbox", "off"]
        command += ["--build-jobs", str(jobs or nodes), "--results-dir", str(root / "results")]
        command += ["--build-dir", str(root / "builds"), "--log-dir", str(root / "logs")]
        started = time.monotonic()
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
        seconds = time.monotonic() - started
        found = BUILT.search(done.stdout)
        if found is None:
            sys.exit(f"no build count from run.py (exit {done.returncode}):\n{done.stderr[-2000:]}")
        return int(found.group(1)), int(found.group(2)), seconds
    finally:
        cluster.shutdown()
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("suite", type=Path, help="a folder with problems/ and solutions/")
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 3], help="default: 1 2 3")
    parser.add_argument("--jobs", type=int, help="--build-jobs (default: the node count)")
    args = parser.parse_args(argv)
    print(f"this machine: {os.cpu_count()} cores; every node runs on it")
    for nodes in args.nodes:
        built, given, seconds = one_count(args.suite, nodes, args.jobs)
        rate = built / seconds * 3600
        done = f"{built} of {given} built in {seconds:.0f} s"
        print(f"{nodes} node(s): {done}: {rate:.0f} an hour (a solution without a build counts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
