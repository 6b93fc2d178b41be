#!/usr/bin/env bash
# What to verify on a lent GPU machine (the `device` tool), in two parts that each fit in one
# call; outputs, results and logs are copied to $OUT.
#   GIT_COMMIT=<sha> bash scripts/gpu_session.sh run      prebuild, run.py --all, ceilings
#   GIT_COMMIT=<sha> bash scripts/gpu_session.sh checks   sanitizer on the fast kernels, tests
# Each step has a time limit so that the call ends in time.
set -uo pipefail
export PYTHONUNBUFFERED=1
out=${OUT:-/tmp/gpu-session}
mkdir -p "$out"
python=${PYTHON:-python3}
part=${1:-run}

gpu_state() {
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw \
    --format=csv,noheader
}
step() {  # step NAME SECONDS COMMAND...: run it, keep its output, note its exit status
  local name=$1 limit=$2
  shift 2
  timeout "$limit" "$@" 2>&1 | tee "$out/$name.txt"
  echo "$name exit: ${PIPESTATUS[0]}" | tee -a "$out/$name.txt" "$out/summary.txt"
}
{ echo "before $part: $(gpu_state)"; $python -c 'import torch; print("torch", torch.__version__)'; } \
  | tee -a "$out/machine.txt"

if [ "$part" = run ]; then
  step prebuild 240 $python scripts/prebuild.py --jobs 8
  step run-all 300 $python run.py --all
  step speed-of-light 150 $python scripts/speed_of_light.py --json "$out/speed_of_light.json"
else
  for solution in multilabel_margin/fast_cuda multilabel_margin/warp_cuda smooth_l1/fast_cuda; do
    step "memcheck-${solution//\//-}" 120 compute-sanitizer --tool memcheck --error-exitcode 9 \
      $python scripts/run_cases.py "${solution%%/*}" "solutions/$solution.py"
  done
  step pytest-gpu 200 $python -m pytest -q -rs -m gpu
fi

echo "after $part: $(gpu_state)" | tee -a "$out/machine.txt"
tar czf "$out/results.tar.gz" results
[ -d logs ] && tar czf "$out/logs.tar.gz" logs
