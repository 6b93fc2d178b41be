#!/usr/bin/env bash
# How many untimed calls CudaTimer puts before a call that waits for the device
# (CudaTimer.WARM_CALLS): run.py on tests/fixtures/toy_sync (five rows, each a way of waiting)
# with 1 and with 4 warm calls, twice each, from copies of the working tree; each line gives a
# row's timed median / the wall-clock loop's per-call figure = their ratio. On a GPU machine:
#   bash tuning/sync_warm_calls.sh
# Run on the lent NVIDIA H200 at 0e255ad plus the no-query _waited, 2026-12-02 ~10:58 UTC;
# output in tuning/results/sync_warm_calls_h200.txt.
set -uo pipefail
export PYTHONUNBUFFERED=1 HARNESS_BUILD_DIR=/tmp/builds
SOL=tests/fixtures/toy_solutions/cuda_synchronizes.py
timeout 150 python3 run.py --problem tests/fixtures/toy_sync --solution $SOL --build-only > /dev/null 2>&1
echo "built at $SECONDS s"
for warm in 1 4 1 4; do
  rm -rf /tmp/v && mkdir -p /tmp/v && tar --exclude=./.git --exclude=./.cache --exclude=./.mypy_cache -cf - . | tar -xf - -C /tmp/v
  sed -i "s/    WARM_CALLS = [0-9]* /    WARM_CALLS = $warm /" /tmp/v/harness/measure/timing.py
  (cd /tmp/v && timeout 60 python3 run.py --problem tests/fixtures/toy_sync --solution $SOL --max-samples 200 --results-dir /tmp/r$warm-$SECONDS > /dev/null 2>&1)
  python3 - /tmp/r$warm-* $warm <<'PY'
import glob, json, sys
path = sorted(glob.glob(sys.argv[1] + "/*/runs.jsonl"))[-1] if len(sys.argv) > 3 else glob.glob(sys.argv[-2] + "/*/runs.jsonl")[0]
r = [json.loads(l) for l in open(path)][-1]
print("warm", sys.argv[-1], " ".join(f"{b['name']}={b['solution']['median_us']:.1f}/{b['wall_us']:.1f}={b['solution']['median_us']/b['wall_us']:.2f}" for b in r["benchmarks"]))
PY
  rm -rf /tmp/r$warm-*
done
echo "done at $SECONDS s"
