"""multilabel_margin's warp_cuda at 4096x8192 with 0, 1, 4, 8, 16 labels per row, x.sum() over
the same x, and whether a C++ extension's TORCH_CHECK reaches Python on that machine (with and
without -fopenmp): probes for problems/multilabel_margin/NOTES.md.

Run on: the lent NVIDIA H200, at commit 81e52c2, 2026-11-29 ~11:13 UTC (issue 3). Recorded
output: tuning/results/multilabel_labels_per_row.json (written as $OUT/probe.json).

Does not run now: its import of harness.timing.time_cuda is stale. harness.timing is now
harness.measure.timing, and flush_buffer's import points there, but time_cuda (a fixed number
of warm-up and timed calls, L2 written before each, a Measurement back) was removed in commit
bc52895 (issue 4). What times calls now is harness.measure.timing.sample with a CudaTimer (the
stopping rule, paired rounds, L2 read and host time hidden behind a sleep before each call),
which measures differently, so the script is kept as it was run, for its recorded figures.
"""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness.timing import time_cuda  # stale: removed in bc52895 (see the docstring)

from harness.loading import import_file, load_problem, seed_everything
from harness.measure.timing import flush_buffer
from harness.toolchain import build_folder

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(os.environ.get("OUT", "/tmp"))
res = {}
THROW = """
import sys; sys.path.insert(0, '.')
from pathlib import Path
from harness.toolchain import prepare_environment
prepare_environment(Path('.cache/exp/throw{flag}'), '9.0')
from torch.utils.cpp_extension import load_inline
src = 'int64_t fail(int64_t v) {{ TORCH_CHECK(v < 0, "value ", v, " too big"); return v; }}'
m = load_inline(name='throw{flag}', cpp_sources='#include <torch/extension.h>\\n' + src, functions=['fail'], extra_cflags={cflags!r}, extra_ldflags={cflags!r})
try: m.fail(3); print('no raise')
except Exception as e: print('raised', type(e).__name__, str(e).splitlines()[0])
"""  # noqa: E501 (the probe's code, as it was run)


def throw(flag, cflags):
    p = subprocess.run(
        [sys.executable, "-c", THROW.format(flag=flag, cflags=cflags)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    return (
        f"rc {p.returncode}: {p.stdout.strip()[-200:]} "
        f"{p.stderr.strip()[-300:] if p.returncode else ''}"
    )


with ThreadPoolExecutor(2) as pool:
    plain, omp = pool.submit(throw, "plain", []), pool.submit(throw, "omp", ["-fopenmp"])
    res["C++ TORCH_CHECK throw, no -fopenmp"] = plain.result()
    res["C++ TORCH_CHECK throw, -fopenmp"] = omp.result()
print(res, flush=True)

path = ROOT / "solutions/multilabel_margin/warp_cuda.py"
os.environ["TORCH_EXTENSIONS_DIR"] = str(
    build_folder(ROOT / ".cache/builds", "multilabel_margin", path, "9.0")
)
model = import_file(path).ModelNew("mean")
flush = flush_buffer(torch.device("cuda"))
ml = load_problem("multilabel_margin", ROOT / "problems/multilabel_margin/reference.py")
seed_everything(1)
x, y = [v.cuda() for v in ml.benchmarks[1].get_inputs()]


def t(fn):
    m = time_cuda(fn, warmup=20, reps=200, flush=flush)
    return round(m.median_us, 2), round(100 * m.spread, 1)


res["warp 4096x8192, 1-10 labels"] = t(lambda: model(x, y))
none = torch.full_like(y, -1)
res["warp 4096x8192, no labels (stream + mask only)"] = t(lambda: model(x, none))
for k in (1, 4, 8, 16):
    yk = none.clone()
    yk[:, :k] = torch.arange(k, device="cuda") * 7
    res[f"warp 4096x8192, {k} labels per row"] = t(lambda yk=yk: model(x, yk))
res["x.sum() 4096x8192 (read x once)"] = t(lambda: x.sum())
print(json.dumps(res, indent=1), flush=True)
(OUT / "probe.json").write_text(json.dumps(res, indent=1))
