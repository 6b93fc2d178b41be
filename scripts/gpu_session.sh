#!/usr/bin/env bash
# Everything to verify on a lent GPU machine in one call (the `device` tool): every shipped
# solution through `run.py --all`, then the GPU tests, then the rest of the suite; results,
# logs and outputs are copied to $OUT. Each step has a time limit so the call ends in time.
#   usage: GIT_COMMIT=<sha> bash scripts/gpu_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
out=${OUT:-/tmp/gpu-session}
mkdir -p "$out"
python=${PYTHON:-python3}

gpu_state() {
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw \
    --format=csv,noheader
}
{ echo "before: $(gpu_state)"; $python -c 'import torch; print("torch", torch.__version__)'; } \
  | tee "$out/machine.txt"

timeout 300 $python run.py --all 2>&1 | tee "$out/run-all.txt"
echo "run.py --all exit: ${PIPESTATUS[0]}" | tee -a "$out/run-all.txt"

timeout 200 $python -m pytest -q -rs -m gpu 2>&1 | tee "$out/pytest-gpu.txt"
echo "pytest -m gpu exit: ${PIPESTATUS[0]}" | tee -a "$out/pytest-gpu.txt"

timeout 150 $python -m pytest -q -rs -m "not gpu" 2>&1 | tee "$out/pytest-rest.txt"
echo "pytest -m 'not gpu' exit: ${PIPESTATUS[0]}" | tee -a "$out/pytest-rest.txt"

echo "after: $(gpu_state)" | tee -a "$out/machine.txt"
tar czf "$out/results.tar.gz" results
tar czf "$out/logs.tar.gz" logs
