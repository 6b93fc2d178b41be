#!/usr/bin/env bash
# Every test that needs a GPU, in one command (docs/development.md), on a GPU machine:
#   bash scripts/gpu_tests.sh [PYTEST ARGS...]
# 1. The extensions the tests build are built in parallel, with the harness's own build pool
#    (run.py --build-only, into run.py's build cache, which the tests share): every shipped
#    solution and every fixture a GPU test builds.
# 2. At the same time, the GPU tests that neither time nor take the whole device run JOBS at a
#    time (pytest-xdist; tests sharing a module fixture stay in one worker).
# 3. The tests marked `alone` (they time, or fill the device) run one at a time, with nothing
#    beside them.
# The last line counts the tests that ran, passed, failed and were skipped, over both parts.
# Without a GPU it says so in one line and stops (exit 1), before building anything. Stopped
# (SIGTERM, SIGHUP, Ctrl-C), it stops every part it started, and each run.py its processes.
set -uo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
jobs=${JOBS:-10}
cores=$(nproc)

if ! nvidia-smi -L >/dev/null 2>&1; then
  gpu="nvidia-smi is missing or finds no GPU"
elif ! $python -c "import sys, torch; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
  gpu="torch sees no CUDA device"
fi
if [ -n "${gpu:-}" ]; then
  echo "gpu tests: no GPU here ($gpu): run this on a machine with an NVIDIA GPU;" \
    "python -m pytest runs the other tests" >&2
  exit 1
fi
out=$(mktemp -d)
started=()  # the parts running in the background, stopped with the script
stop() {
  trap - TERM HUP INT
  [ ${#started[@]} -gt 0 ] && kill -TERM "${started[@]}" 2>/dev/null
  wait
  echo "gpu tests: stopped" >&2
  exit 143
}
trap stop TERM HUP INT

toy_builds=()
for file in tests/fixtures/toy_solutions/*.py tests/fixtures/cheats/*.py; do
  case $file in *cuda_synchronizes.py) continue ;; esac  # judged on toy_sync, built there
  grep -q "cpp_extension" "$file" && toy_builds+=(--solution "$file")
done
build_all() {  # four build runs side by side, sharing the cores (19 shipped, 8 toy, and one
  # each for the three fixtures with problems of their own); the toy builds get half: the cheat
  # runs, the suite's longest, wait for them (on the H200, 158-228 s of their 230 s at 0e255ad)
  trap 'kill -TERM $(jobs -p) 2>/dev/null; wait; exit 143' TERM
  $python run.py --all --build-only --build-jobs $((cores * 3 / 8 > 0 ? cores * 3 / 8 : 1)) &
  $python run.py --problem tests/fixtures/toy "${toy_builds[@]}" --build-only \
    --build-jobs $((cores / 2 > 0 ? cores / 2 : 1)) &
  $python run.py --problem tests/fixtures/toy_level \
    --solution tests/fixtures/cheats_mean/first_quarter_cuda.py --build-only &
  $python run.py --problem tests/fixtures/long_matvec \
    --solution tests/fixtures/long_matvec_solutions/cuda_rows.py --build-only &
  $python run.py --problem tests/fixtures/toy_sync \
    --solution tests/fixtures/toy_solutions/cuda_synchronizes.py --build-only &
  wait  # a build that fails here (the compile-error fixture) is the tests' to judge
  echo "gpu tests: builds done at ${SECONDS} s"
}
# Part 2 starts with the builds: a test that needs an extension not yet built waits for it
# (torch's builder holds a lock in the extension's folder) or builds it itself.
build_all >"$out/builds.txt" 2>&1 &
builder=$!
started+=("$builder")

if $python -c "import xdist" 2>/dev/null; then
  parallel=(-n "$jobs" --dist loadgroup)
else
  echo "gpu tests: pytest-xdist is not installed, so part 2 runs one test at a time"
  parallel=()
fi
# In the background, waited for: a trap runs at once only while the script waits.
$python -m pytest -m "gpu and not alone" "${parallel[@]}" -q -rs --junitxml "$out/part2.xml" "$@" &
started+=($!)
wait $!
part2=$?
echo "gpu tests: part 2 (in parallel) done at ${SECONDS} s"
wait "$builder"  # nothing may build beside part 3
grep -E "error|gpu tests:" "$out/builds.txt"
$python -m pytest -m "gpu and alone" -q -rs --junitxml "$out/part3.xml" "$@" &
started+=($!)
wait $!
part3=$?
$python - "$out/part2.xml" "$out/part3.xml" "$SECONDS" <<'PY'
import sys
import xml.etree.ElementTree as ET

totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
for path in sys.argv[1:3]:
    try:
        suite = ET.parse(path).getroot().find("testsuite")
    except (OSError, ET.ParseError):
        continue
    for key in totals:
        totals[key] += int(suite.get(key, 0)) if suite is not None else 0
failed = totals["failures"] + totals["errors"]
passed = totals["tests"] - failed - totals["skipped"]
print(
    f"gpu tests: {totals['tests']} ran, {passed} passed, {failed} failed, "
    f"{totals['skipped']} skipped, in {sys.argv[3]} s"
)
PY
exit $((part2 != 0 || part3 != 0))
