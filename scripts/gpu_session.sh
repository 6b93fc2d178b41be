#!/usr/bin/env bash
# What to verify on a lent GPU machine (the `device` tool), in two parts that each fit in one
# call; outputs, results and logs are copied to $OUT.
#   GIT_COMMIT=<sha> bash scripts/gpu_session.sh run       run.py --all --compile
#                                                          (and $RUN_FLAGS, such as --ncu)
#   GIT_COMMIT=<sha> bash scripts/gpu_session.sh validate  a second run, validate_timing.py,
#                                                          run.py --compare, a --graph run
#                                                          (GRAPH=0: none; RESTORE=<run's
#                                                          results.tar.gz> on a fresh machine)
#   GIT_COMMIT=<sha> bash scripts/gpu_session.sh checks    every GPU test (scripts/gpu_tests.sh)
#   bash scripts/gpu_session.sh backends   issue 60: softmax's and smooth_l1's CUDA and Triton
#                     solutions judged twice (the second compiles nothing), smooth_l1 at bf16
#   GIT_COMMIT=<sha> bash scripts/gpu_session.sh sanitize  memcheck on the fast kernels' cases
#   [SUITE_FLAGS="--style llm --samples 3"] bash scripts/gpu_session.sh throughput
#                     issue 24's and 44's figures (docs/scale.md): a level-1-sized
#                     suite of COUNT problems (default 40) built alone (builds per hour), then
#                     swept on those builds (cached); a second suite (seed 1, COLD problems,
#                     default 30) swept cold
#   bash scripts/gpu_session.sh multilabel-14   multilabel_margin with 14 CUDA solutions, cold
#                     (WITH_CPU=1: and cpu_cpp; BUILD_JOBS=N: --build-jobs N)
#   bash scripts/gpu_session.sh rows-alone   after throughput: ROWS (6) of its cold sweep's
#                     (FROM=cached: the cached one's) solutions each run alone, and --compare
#                     against the sweep's rows
#   bash scripts/gpu_session.sh sandbox-cost   issue 26: every shipped solution (those of
#                     SANDBOX_PROBLEMS, where given) built on each side, the attack fixtures
#                     with `auto` (ATTACKS=0: not), then the shipped solutions of
#                     SANDBOX_PROBLEMS (default all, as time allows) run with the sandbox off,
#                     then auto, ROUNDS times (default 1): seconds, --compare of each round
#                     (and, with two, of each side against itself), and the first records
#   bash scripts/gpu_session.sh sandbox-sweep   issue 26's cost: the 17 shipped CUDA solutions
#                     (not the CPU-timed cpp ones) built on each side beside the attack
#                     fixtures, then swept in one run.py call without the sandbox, then with
#                     it: seconds of each call, and --compare
# On a machine with two GPUs (issue 27, docs/scale.md), a call each:
#   GPUS=0 bash scripts/gpu_session.sh scaling     the level-1-sized suite (COUNT, default 100,
#   GPUS=all bash scripts/gpu_session.sh scaling   seed 2) swept cold on GPU 0, then on both
#   bash scripts/gpu_session.sh resume             the same on both, killed after KILL_AFTER (40)
#                                                  records, then --resume: every record once
#   bash scripts/gpu_session.sh gpu-rows           the shipped problems timed on cuda:0, then on
#                                                  cuda:1, and --compare between the two
#   KB_ROOT=<problems/ and solutions/ by level> KB_SRC=<KernelBench checkout> KB_WHEELS=<wheels> \
#     bash scripts/gpu_session.sh kernelbench-all   issue 43: every problem of KB_LEVELS judged
#                     (audits, sweeps, KernelBench's evaluator beside; see the part), resumable
#                     over several calls on one warm machine
#   KB_ROOT=... KB_SRC=... KB_WHEELS=... bash scripts/gpu_session.sh kernelbench-finish
#                     issue 43's rest (see the part): the comparison's memory, the TF32 check,
#                     then each level swept and KernelBench's evaluator in KB_SHARDS processes
#   bash scripts/gpu_session.sh ray-sweep   issue 44: a trimmed Ray (scripts/trim_ray.sh .raytrim,
#                     carried) started here, and the LLM-shaped suite swept on it (see the part)
#   bash scripts/gpu_session.sh ray-rate    issue 44: builds an hour on 1, 2, 3 local Ray nodes
#   KB_ROOT=<problems/ and solutions/ by level> [RATE=1] bash scripts/gpu_session.sh sol
#                     issue 47: a sample of KernelBench's levels 1 and 2 swept (the SOL
#                     columns), then every problem's bound (and RATE=1: ray-rate)
#   KB_SRC=<KernelBench checkout> KB_PROBLEMS=<its level1 files> bash scripts/gpu_session.sh \
#       kernelbench   the side-by-side with KernelBench's own evaluator (docs/kernelbench.md, "Judged as
#                     KernelBench judges"): builds first, KernelBench's evaluator, then the
#                     profile's sweep (half the time left), the default timer's sweep, and the
#                     table (kb-table.md); both KB paths outside git, carried
#   KB_PROBLEMS=... bash scripts/gpu_session.sh kernelbench-rest
#                     the rest of the profile's sweep and the default timer's (--resume), in a
#                     second call; `kernelbench_side_by_side.py table` then joins the three
#   KB_TRIALS=N       with either: KernelBench's and the profile's timers take N trials a side
#                     (default 100); `table --trials 100` still gives the 100-trial figures
#   BUDGET_S=N        the seconds a kernelbench part may take in all (default 585), when the
#                     call runs something else first
#   PROBLEMS="a b" GIT_COMMIT=<sha> bash scripts/gpu_session.sh run
#                     re-run only these problems (run.py --problem a, then b, with --compile)
# Each step has a time limit so that the call ends in time. NVML's Python binding (for the
# clock and temperature columns) is installed from a wheel under $WHEELS when one is there.
set -uo pipefail
export PYTHONUNBUFFERED=1
# The device's copy of the tree may carry a stale .git (the session's first), so the records of
# the parts that make committed tables must be told the commit (harness/run/machine.py).
if [[ "${1:-run}" =~ ^(run|validate)$ ]] && [ -z "${GIT_COMMIT:-}" ]; then
  echo "gpu_session.sh ${1:-run}: set GIT_COMMIT=\$(git rev-parse --short=12 HEAD) (the commit whose tree" \
    "was sent), or the records name the device copy's .git" >&2
  exit 2
fi
out=${OUT:-/tmp/gpu-session}
mkdir -p "$out"
python=${PYTHON:-python3}
part=${1:-run}
budget=${BUDGET_S:-585}  # seconds this part may take in all (a device call allows 600)

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

wheels=${WHEELS:-exp/wheels}
if ! $python -c 'import pynvml' 2>/dev/null && ls "$wheels"/nvidia_ml_py*.whl >/dev/null 2>&1; then
  $python -m pip install --quiet --no-index "$wheels"/nvidia_ml_py*.whl
fi

# Results live in $STATE (default /tmp/gpu-state) so that later parts, run on the same warm
# machine, see what earlier parts recorded; every part copies them to $OUT.
state=${STATE:-/tmp/gpu-state}
# RESTORE=<an earlier part's results.tar.gz>: its state, where a fresh machine has none (a
# validate part whose run part ran on a machine since given back; builds are made again)
if [ -n "${RESTORE:-}" ] && ! [ -d "$state" ]; then
  mkdir -p "$state" && tar xzf "$RESTORE" -C "$state" && echo "state restored from $RESTORE"
fi
[ -d "$state/results" ] || { mkdir -p "$state" && cp -r results "$state/results"; }
gpu=$($python -c 'import torch, re; print(re.sub("[^a-z0-9]+", "-", torch.cuda.get_device_name().lower()).strip("-"))')
first=$state/results/$gpu second=$state/second/$gpu

ray_site() {  # Ray's wheel is over the device tool's carry: RAY_TRIM (default .raytrim,
  # scripts/trim_ray.sh's ray-trim.tar.xz and wheels/) unpacked beside the checkout, on the path
  local trim=${RAY_TRIM:-.raytrim} site=$state/ray-site wheel name
  if [ ! -d "$site/ray" ]; then
    mkdir -p "$site" && tar xJf "$trim/ray-trim.tar.xz" -C "$site"
    for wheel in "$trim"/wheels/*.whl; do  # only what this host lacks: torch keeps its own
      name=$(basename "$wheel" | cut -d- -f1)
      $python -c "import importlib.metadata as m; m.version('$name')" 2>/dev/null ||
        $python -m pip install -q --no-index --no-deps --target "$site" "$wheel"
    done
  fi
  export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
}

ray_rate() {  # issue 44: builds an hour on 1, 2, 3 local Ray nodes over the LLM-shaped suite
  # of RATE_COUNT problems (default 6, seed 3: 5 CUDA builds), in the time the part has left
  ray_site
  $python scripts/make_suite.py "$state/rate-suite" --style llm --count "${RATE_COUNT:-6}" \
    --seed 3 >/dev/null
  step ray-rate $((budget - SECONDS - 10)) $python scripts/ray_build_rate.py "$state/rate-suite"
}

kb_prelude() {  # kernelbench-all and -finish: KernelBench's wheels, then once a machine the
  # comparison's memory on a 5.4e9-element output
  if [ -n "${KB_WHEELS:-}" ] && [ ! -d "$state/kb-site" ]; then
    $python -m pip install -q --no-index --no-deps --target "$state/kb-site" "$KB_WHEELS"/*.whl
  fi
  export PYTHONPATH=$state/kb-site
  [ "${KB_CHECKS:-1}" = 0 ] || [ -f "$state/compare-memory.json" ] || step compare-memory 240 \
    $python scripts/compare_memory.py --json "$state/compare-memory.json"
}

sweep=(--problems "${KB_PROBLEMS:-}" --solutions examples/kernelbench_level1 --build-jobs 16)
as_kb=(--as kernelbench --kernelbench-trials "${KB_TRIALS:-100}")
if [ "$part" = run ] && [ -n "${PROBLEMS:-}" ]; then
  for problem in $PROBLEMS; do
    step "run-$problem" 200 $python run.py --problem "$problem" --compile ${RUN_FLAGS:-} \
      --results-dir "$state/results"
  done
elif [ "$part" = run ]; then
  step run-all 560 $python run.py --all --compile ${RUN_FLAGS:-} --results-dir "$state/results"
elif [ "$part" = validate ]; then
  # The same code again, reusing the first run's copy ceiling and compile baseline.
  mkdir -p "$second" && cp "$first"/{ceiling.json,baselines.jsonl} "$second/"
  step run-again 240 $python run.py --all --compile --results-dir "$state/second"
  step validate 150 $python scripts/validate_timing.py --results "$state/results" \
    --runs "$first" "$second" --json "$out/validation.json"
  step compare 30 $python run.py --compare "$first" "$second"
  [ "${GRAPH:-1}" = 0 ] || step graph 150 $python run.py --all --graph --results-dir "$state/graph"
elif [ "$part" = backends ]; then  # issue 60: CUDA and Triton solutions of one problem
  # judged (each build recorded), the same files again (nothing compiled), smooth_l1 at bf16,
  # and the Triton tests that need a GPU
  for round in first again; do
    step "backends-$round-softmax" 150 $python run.py --problem softmax --solution fast_cuda \
      --solution triton_online --results-dir "$state/backends"
    step "backends-$round-smooth_l1" 100 $python run.py --problem smooth_l1 \
      --solution triton_blocks --results-dir "$state/backends"
  done
  step backends-bf16 120 $python run.py --problem smooth_l1 --solution triton_blocks \
    --precision bf16 --results-dir "$state/backends"
  step backends-tests 120 $python -m pytest -q -x tests/test_triton.py tests/test_precision.py
elif [ "$part" = checks ]; then
  # Every GPU test (scripts/gpu_tests.sh: builds first, then the tests in parallel, then the
  # ones that must run alone).
  step gpu-tests 570 bash scripts/gpu_tests.sh
elif [ "$part" = kernelbench ]; then
  # Everything is built first (the sweeps' timings never share the host with a build), and
  # KernelBench's side reuses those builds; then the profile's sweep as far as time allows.
  # The solutions are examples/kernelbench_level1, the problems KB_PROBLEMS; KernelBench's
  # pydantic comes from wheels in KB_WHEELS when given.
  step kb-build 240 $python run.py "${sweep[@]}" --build-only
  if [ -n "${KB_WHEELS:-}" ]; then
    $python -m pip install -q --no-index --no-deps --target "$state/kb-site" "$KB_WHEELS"/*.whl
  fi
  step kb-theirs 170 env PYTHONPATH="$state/kb-site" $python scripts/kernelbench_side_by_side.py \
    measure "$KB_SRC" "$KB_PROBLEMS" examples/kernelbench_level1 .cache/builds "$state/kb/kb.jsonl" \
    --trials "${KB_TRIALS:-100}"
  step kb-profile $(((budget - SECONDS) / 2)) $python run.py "${sweep[@]}" "${as_kb[@]}" \
    --results-dir "$state/kb"
  step kb-default $((budget - SECONDS)) $python run.py "${sweep[@]}" --results-dir "$state/kb"
  $python scripts/kernelbench_side_by_side.py table "$state/kb/kb.jsonl" \
    "$state/kb/$gpu-kernelbench" "$state/kb/$gpu" | tee "$out/kb-table.md"
elif [ "$part" = kernelbench-rest ]; then
  # A second call: the profile's sweep where it stopped, then the default timer's sweep;
  # `kernelbench_side_by_side.py table` then joins the three, anywhere.
  step kb-profile 300 $python run.py "${sweep[@]}" "${as_kb[@]}" --resume \
    --results-dir "$state/kb"
  step kb-default $((budget - SECONDS)) $python run.py "${sweep[@]}" --resume --results-dir "$state/kb"
elif [ "$part" = throughput ]; then
  # SPARE_PROBE=1: first the spares' import and warm-up alone and six at once
  [ "${SPARE_PROBE:-}" != 1 ] || step spare-probe 60 $python scripts/spare_probe.py --counts 1 6
  # Builds alone first (so that their rate is the host's), then the judging on cached builds,
  # then a sweep with its builds in it; the sweeps' summaries give the per-solution medians.
  # CACHED=after-cold: no separate suite; the cold sweep first, then the same suite again on
  # the builds it left (the cached figure).
  warm=$state/l1-warm cold=$state/l1-cold
  # SUITE_FLAGS: more make_suite.py flags (issue 44: "--style llm --samples 3", LLM-shaped)
  $python scripts/make_suite.py "$cold" --count "${COLD:-30}" --sizes level1 --seed 1 \
    ${SUITE_FLAGS:-} >/dev/null
  sweep_of() {  # sweep_of LABEL SUITE LIMIT [RUN FLAGS...]: the load test's sweep of SUITE
    local label=$1 suite=$2 limit=$3
    shift 3
    step "l1-$label" "$limit" $python scripts/load_test.py "$suite" --label "$label" \
      --json "$out/l1-$label.json" -- --budget-ms 500 "$@"
  }
  if [ "${CACHED:-}" = after-cold ]; then
    # SPARES_LIST="4 10": a cached sweep for each, with HARNESS_SPARES set so (issue 44),
    # each given an equal share of the time the cold sweep leaves
    read -ra spares <<<"${SPARES_LIST:-}"
    left=${#spares[@]}
    sweep_of cold "$cold" $((budget - SECONDS - 120 * (left > 0 ? left : 1))) \
      --build-jobs "$(nproc)"
    [ "$left" -gt 0 ] || sweep_of cached "$cold" $((budget - SECONDS))
    for count in "${spares[@]}"; do
      HARNESS_SPARES=$count sweep_of "cached-spares-$count" "$cold" $(((budget - SECONDS) / left))
      left=$((left - 1))
    done
  else
    $python scripts/make_suite.py "$warm" --count "${COUNT:-40}" --sizes level1 ${SUITE_FLAGS:-} >/dev/null
    step l1-builds 200 $python run.py --problems "$warm/problems" --solutions "$warm/solutions" \
      --build-dir "$warm/builds" --build-only --build-jobs "$(nproc)"
    sweep_of cached "$warm" 170
    sweep_of cold "$cold" $((budget - SECONDS)) --build-jobs "$(nproc)"
  fi
elif [ "$part" = rows-alone ]; then
  # After throughput: ROWS (default 6) of a sweep's CUDA solutions, each run alone (a run.py of
  # its own, nothing else on the host), then --compare against the sweep's rows. FROM=cold
  # (default: the sweep whose builds ran beside its judging, stopped while it timed) or cached.
  # After CACHED=after-cold both sweeps judged the cold suite.
  from=${FROM:-cold} && suite=$state/l1-${from/cached/warm} && solo=$state/l1-alone-$from
  [ -d "$suite" ] || suite=$state/l1-cold
  for file in $(ls "$suite"/solutions/*/cuda_ok*.py | head -n "${ROWS:-6}"); do
    name=$(basename "$(dirname "$file")")
    step "alone-$name" 60 $python run.py --problem "$suite/problems/$name.py" --solution "$file" \
      --build-dir "$suite/builds" --results-dir "$solo" --budget-ms 500 >/dev/null
  done
  step rows-compare 30 $python run.py --compare "$suite/results-$from/$gpu" "$solo/$gpu"
elif [ "$part" = sandbox-cost ]; then
  read -ra problems <<<"${SANDBOX_PROBLEMS:-multilabel_margin softmax sum_reduce matmul conv1d lltm smooth_l1}"
  # Each side builds first, in a build cache of its own (one cache shared by both would be
  # rebuilt by every run: a build made in the sandbox names another folder than one made
  # without it, docs/anticheat.md); both sides build at once, then the attack fixtures run with
  # `auto` on the GPU (ATTACKS=0 skips them), then each problem is run without the sandbox and
  # with it, one after the other, while the call has time (45-145 s a problem and round).
  which=(--all) && [ -z "${SANDBOX_PROBLEMS:-}" ] || which=()  # else each problem's own
  for mode in off auto; do
    for problem in "${which[@]:-${problems[@]}}"; do
      [ "$problem" = --all ] || problem="--problem $problem"
      # shellcheck disable=SC2086  # "--problem NAME" is two words
      $python run.py $problem --build-only --sandbox "$mode" --build-jobs $(($(nproc) / 2)) \
        --build-dir "$state/sandbox-builds-$mode" >>"$out/build-$mode.txt" 2>&1
    done &
  done
  wait && echo "sandbox builds done at $SECONDS s" | tee -a "$out/summary.txt"
  [ "${ATTACKS:-1}" = 0 ] || step sandbox-attacks 150 $python -m pytest tests/test_sandbox.py -m gpu -q -rs
  rounds=${ROUNDS:-1}
  for problem in "${problems[@]}"; do
    [ $((budget - SECONDS)) -gt $((75 * rounds)) ] || { echo "no time for $problem" | tee -a "$out/summary.txt"; continue; }
    for round in $(seq "$rounds"); do
      for mode in off auto; do
        start=$(date +%s.%N)
        step "sandbox-$mode-$problem-$round" 150 $python run.py --problem "$problem" \
          --sandbox "$mode" --build-dir "$state/sandbox-builds-$mode" \
          --results-dir "$state/sandbox-$mode-$round" >/dev/null
        echo "sandbox $mode $problem round $round: $(awk "BEGIN {print $(date +%s.%N) - $start}") s" |
          tee -a "$out/summary.txt"
      done
    done
  done
  # Without and with the sandbox, each round; with two rounds, each side against itself too
  # (the same code in two processes: how far rows move with no change at all).
  pairs="off-1:auto-1" && [ "$rounds" -lt 2 ] || pairs="$pairs off-2:auto-2 off-1:off-2 auto-1:auto-2"
  for pair in $pairs; do
    step "compare-${pair/:/-vs-}" 30 $python run.py --compare "$state/sandbox-${pair%%:*}/$gpu" \
      "$state/sandbox-${pair##*:}/$gpu"
  done
  for side in off-1 auto-1; do cp "$state/sandbox-$side/$gpu/runs.jsonl" "$out/$side-runs.jsonl"; done
elif [ "$part" = sandbox-sweep ]; then
  # One sweep a side, so that a run's own start and its first worker's warm-up (5-9 s, the
  # same with the sandbox or without) are spread over 17 solutions, not one or two.
  sols=$state/sweep-solutions && rm -rf "$sols" "$state"/sweep-{builds,results}-* && mkdir -p "$sols"
  cp -r solutions/*/ "$sols/" && rm -f "$sols"/lltm/cpp.py "$sols"/multilabel_margin/cpu_cpp.py
  for mode in off auto; do
    $python run.py --problems problems --solutions "$sols" --build-only --sandbox "$mode" \
      --build-jobs $(($(nproc) / 2)) --build-dir "$state/sweep-builds-$mode" >"$out/build-$mode.txt" 2>&1 &
  done
  step sandbox-attacks 200 $python -m pytest tests/test_sandbox.py -m gpu -q -rs  # times nothing
  wait && echo "sandbox builds done at $SECONDS s" | tee -a "$out/summary.txt"
  for mode in off auto; do
    start=$(date +%s.%N)
    step "sweep-$mode" 180 $python run.py --problems problems --solutions "$sols" --sandbox "$mode" \
      --build-dir "$state/sweep-builds-$mode" --results-dir "$state/sweep-results-$mode" >/dev/null
    echo "sandbox $mode sweep: $(awk "BEGIN {print $(date +%s.%N) - $start}") s" | tee -a "$out/summary.txt"
  done
  step sweep-compare 40 $python run.py --compare "$state/sweep-results-off/$gpu" "$state/sweep-results-auto/$gpu"
elif [ "$part" = multilabel-14 ]; then
  # The 4 shipped CUDA solutions and 10 copies under other names (WITH_CPU=1: cpu_cpp too),
  # every build cold, run.py's own --build-jobs unless BUILD_JOBS is given.
  label=ml${WITH_CPU:+-cpu}${BUILD_JOBS:+-j$BUILD_JOBS}
  copies=$state/$label && rm -rf "$copies" "$state/$label-builds" "$state/$label-results"
  mkdir -p "$copies" && cp solutions/multilabel_margin/*_cuda.py "$copies/"
  [ -z "${WITH_CPU:-}" ] || cp solutions/multilabel_margin/cpu_cpp.py "$copies/"
  for n in 1 2 3 4 5 6 7 8 9 10; do  # 10 more CUDA solutions: the shipped ones, built apart
    base=$(ls solutions/multilabel_margin/*_cuda.py | sed -n "$(((n - 1) % 4 + 1))p")
    sed "s/name=\"multilabel_margin_\([a-z_]*\)\"/name=\"multilabel_margin_\1_copy$n\"/" \
      "$base" >"$copies/copy${n}_$(basename "$base")"
  done
  each=() && for file in "$copies"/*.py; do each+=(--solution "$file"); done
  step "$label" $((budget - SECONDS)) $python run.py --problem multilabel_margin "${each[@]}" \
    ${BUILD_JOBS:+--build-jobs "$BUILD_JOBS"} \
    --build-dir "$state/$label-builds" --results-dir "$state/$label-results"
elif [ "$part" = scaling ] || [ "$part" = resume ]; then
  # Each sweep builds afresh (--fresh-builds: a build folder per label), so that the one-GPU
  # and two-GPU figures both include their builds.
  suite=$state/l1-scale
  [ -f "$suite/expected.json" ] || $python scripts/make_suite.py "$suite" --count "${COUNT:-100}" \
    --sizes level1 --seed 2 >/dev/null
  if [ "$part" = scaling ]; then
    label=gpus-${GPUS:?scaling needs GPUS=0 or GPUS=all} && label=${label//,/-} && more=()
  else
    label=killed && more=(--kill-after "${KILL_AFTER:-40}") && GPUS=all
  fi
  step "$label" $((budget - SECONDS)) $python scripts/load_test.py "$suite" --gpus "$GPUS" \
    --fresh-builds --label "$label" "${more[@]}" --json "$out/$label.json" \
    -- --budget-ms 300 --build-jobs "$(nproc)"
elif [ "$part" = gpu-rows ]; then
  # The same solutions timed on each GPU (builds shared); --compare lists the rows that moved.
  step rows-build 200 $python run.py --all --build-only --build-jobs "$(nproc)"
  for index in 0 1; do
    step "rows-gpu$index" 170 $python run.py --all --device "cuda:$index" \
      --results-dir "$state/gpu$index"
  done
  step rows-compare 30 $python run.py --compare "$state/gpu0/$gpu" "$state/gpu1/$gpu"
elif [ "$part" = kernelbench-all ]; then
  # Issue 43: every problem of KernelBench's levels KB_LEVELS (default "3 2 1") under KB_ROOT
  # (problems/level<L>/ and solutions/level<L>/level_<L>_problem_<N>_sample_0_kernel.py) gets
  # a verdict: once a machine, the comparison's memory on a 5.4e9-element output and every
  # problem's audit; then, in the background across calls (a chain that outlives the call
  # while the machine stays warm), each level's sweep (--check-only --resume) and KernelBench's
  # own evaluator on the same builds (correctness only); each call waits while time allows and
  # copies what is done. KB_SRC: a KernelBench checkout; KB_WHEELS: pydantic and einops wheels.
  # KB_SWEEP_FLAGS: more run.py flags for the sweeps (`--sandbox off` keeps each build in the
  # folder KernelBench's load_inline uses, so its evaluator compiles nothing again); KB_AUDITS=0
  # leaves out the separate audits (each sweep audits its problems anyway).
  root=${KB_ROOT:?kernelbench-all needs KB_ROOT} levels=${KB_LEVELS:-3 2 1}
  kb_prelude
  if ! [ -f "$state/chain.started" ]; then
    touch "$state/chain.started"
    setsid bash -c "for level in $levels; do
        $python run.py --problems $root/problems/level\$level --solutions $root/solutions/level\$level \
          --check-only --resume --build-jobs 16 --results-dir $state/kb ${KB_SWEEP_FLAGS:-} \
          >$state/sweep-\$level.txt 2>&1
        echo \"sweep \$level exit: \$?\" >>$state/chain.txt
        while :; do  # a pair that leaves the CUDA context unusable ends a process (exit 3)
          $python scripts/kernelbench_side_by_side.py measure $KB_SRC $root/problems/level\$level \
            $root/solutions/level\$level .cache/builds $state/kb-\$level.jsonl --no-timing --resume \
            >>$state/kb-\$level.txt 2>&1
          code=\$?; [ \$code = 3 ] || break
        done
        echo \"kernelbench \$level exit: \$code\" >>$state/chain.txt
      done; echo done >>$state/chain.txt" </dev/null >/dev/null 2>&1 &
  fi
  for level in $levels; do
    [ "${KB_AUDITS:-1}" = 0 ] || [ -f "$state/audit-$level.txt" ] || step "audit-$level" 240 $python run.py \
      --problems "$root/problems/level$level" --audit >"$state/audit-$level.txt"
  done
  while [ $((budget - SECONDS)) -gt 20 ] && ! grep -q '^done' "$state/chain.txt" 2>/dev/null; do
    sleep 10
  done
  cat "$state/chain.txt" 2>/dev/null | tee -a "$out/summary.txt"
  for level in $levels; do
    tail -n 12 "$state/sweep-$level.txt" 2>/dev/null | tee -a "$out/summary.txt"
  done
elif [ "$part" = kernelbench-finish ]; then
  # Issue 43's rest, resumable over calls on one warm machine: the comparison's memory on a
  # 5.4e9-element output; the TF32 check (KB_TF32_LEVEL's problems KB_TF32_ONLY, default level
  # 2's 19,20,26: the harness's two profiles, and KernelBench's evaluator with PyTorch's TF32
  # settings and with TF32 off); then in the background, for each level of KB_LEVELS (default
  # "1 2 3"), the sweep (--check-only --resume --sandbox off: builds stay where KernelBench's
  # load_inline finds them) and KernelBench's evaluator on the same builds in KB_SHARDS
  # processes at once (correctness only; from problem KB_FROM_<level>, default 1). KB_CHECKS=0
  # leaves out the memory and TF32 steps; the levels in KB_BUILD_ONLY are only built (from
  # problem KB_FROM_<level>, for KernelBench's side), not swept.
  root=${KB_ROOT:?kernelbench-finish needs KB_ROOT} levels=${KB_LEVELS:-1 2 3} shards=${KB_SHARDS:-3}
  kb_prelude
  tf32_level=${KB_TF32_LEVEL:-2} tf32_only=${KB_TF32_ONLY:-19,20,26}
  if [ "${KB_CHECKS:-1}" != 0 ] && ! [ -f "$state/tf32.done" ]; then
    mkdir -p "$state/tf32/problems" "$state/tf32/solutions"
    for n in ${tf32_only//,/ }; do
      ln -sf "$PWD/$root/problems/level$tf32_level/${n}_"*.py "$state/tf32/problems/"
      ln -sf "$PWD/$root/solutions/level$tf32_level/level_${tf32_level}_problem_${n}_sample_0_kernel.py" \
        "$state/tf32/solutions/"
    done
    for profile in harness kernelbench; do
      step "tf32-$profile" 200 $python run.py --problems "$state/tf32/problems" \
        --solutions "$state/tf32/solutions" --check-only --sandbox off --build-jobs 16 \
        --as "$profile" --results-dir "$state/tf32/$profile"
    done
    for tf32 in default off; do
      step "tf32-kb-$tf32" 200 $python scripts/kernelbench_side_by_side.py measure "$KB_SRC" \
        "$state/tf32/problems" "$state/tf32/solutions" .cache/builds "$state/tf32/kb-$tf32.jsonl" \
        --no-timing --tf32 "$tf32"
    done
    touch "$state/tf32.done"
  fi
  if ! [ -f "$state/finish.started" ]; then
    touch "$state/finish.started"
    setsid bash -c "for level in $levels; do
        from=\$(eval echo \\\${KB_FROM_\$level:-1})
        problems=$root/problems/level\$level solutions=$root/solutions/level\$level
        if [[ ' ${KB_BUILD_ONLY:-} ' == *\" \$level \"* ]]; then
          subset=$state/subset-\$level && mkdir -p \$subset/problems/level\$level \$subset/solutions/level\$level
          for n in \$(seq \$from 100); do
            for file in \$problems/\${n}_*.py \$solutions/level_\${level}_problem_\${n}_sample_0_kernel.py; do
              [ -f \$file ] && ln -sf \$PWD/\$file \$subset/\${file#$root/}
            done
          done
          $python run.py --problems \$subset/problems/level\$level --solutions \$subset/solutions/level\$level --build-only \
            --build-jobs 16 --sandbox off >$state/sweep-\$level.txt 2>&1
        else
          $python run.py --problems \$problems --solutions \$solutions --check-only --resume \
            --build-jobs 16 --sandbox off --results-dir $state/kb >$state/sweep-\$level.txt 2>&1
        fi
        echo \"sweep \$level exit: \$?\" >>$state/chain.txt
        for shard in \$(seq 0 \$(($shards - 1))); do
          while :; do  # a pair that leaves the CUDA context unusable ends a process (exit 3)
            $python scripts/kernelbench_side_by_side.py measure $KB_SRC $root/problems/level\$level \
              $root/solutions/level\$level .cache/builds $state/kb-\$level.s\$shard.jsonl --no-timing \
              --resume --only \$(seq -s, \$from 100) --shard \$shard/$shards >>$state/kb-\$level.txt 2>&1
            code=\$?; [ \$code = 3 ] || break
          done &
        done
        wait
        echo \"kernelbench \$level done\" >>$state/chain.txt
      done; echo done >>$state/chain.txt" </dev/null >/dev/null 2>&1 &
  fi
  while [ $((budget - SECONDS)) -gt 20 ] && ! grep -q '^done' "$state/chain.txt" 2>/dev/null; do
    sleep 10
  done
  { cat "$state/chain.txt" 2>/dev/null
    for level in $levels; do
      tail -n 6 "$state/sweep-$level.txt" 2>/dev/null
      cat "$state"/kb-"$level".s*.jsonl 2>/dev/null | $python -c 'import json, sys
rows = [json.loads(line) for line in sys.stdin if line.strip()]
right = sum(bool(r.get("correctness")) for r in rows)
print(f"kernelbench: {len(rows)} pair(s), {right} correct")'
    done; } | tee -a "$out/summary.txt"
elif [ "$part" = ray-sweep ]; then
  # Issue 44: a sweep on Ray on this GPU host (a head of its 16 cores and its GPU). Ray's wheel
  # is over the device tool's carry, so RAY_TRIM (default .raytrim: scripts/trim_ray.sh's
  # ray-trim.tar.xz and wheels/) is unpacked beside the checkout; then the LLM-shaped suite
  # (COUNT problems, default 20, 3 samples each, level-1 sizes) swept cold with --ray auto,
  # sandbox on, checked against the verdicts known in advance.
  ray_site
  step ray-start 120 $python -m ray.scripts.scripts start --head --num-gpus 1 \
    --include-dashboard false --disable-usage-stats
  $python scripts/make_suite.py "$state/ray-suite" --style llm --samples 3 --sizes level1 \
    --count "${COUNT:-20}" >/dev/null
  step ray-sweep $((budget - SECONDS - 60)) $python run.py --problems "$state/ray-suite/problems" \
    --solutions "$state/ray-suite/solutions" --ray auto --check-only \
    --results-dir "$state/ray-results"
  step ray-check 30 $python scripts/check_sweep.py "$state"/ray-results/*/ \
    "$state/ray-suite/expected.json"
  $python -m ray.scripts.scripts stop >/dev/null 2>&1
elif [ "$part" = ray-rate ]; then
  # Issue 44: builds an hour on a local Ray cluster of 1, 2 and 3 one-CPU nodes, all on this
  # 16-core host (scripts/ray_build_rate.py; the trimmed Ray as for ray-sweep), over the
  # LLM-shaped suite of RATE_COUNT problems (default 6, seed 3: 5 CUDA builds).
  ray_rate
elif [ "$part" = sol ]; then
  # Issue 47: the speed-of-light columns on KernelBench's files. Every SOL_STEP-th problem
  # (default 7) of each level of KB_LEVELS (default "1 2") under KB_ROOT (problems/level<L>/,
  # solutions/level<L>/) built first, both levels at once (no timing beside a build), then each
  # level swept (--budget-ms 200) in its share of SWEEP_S (default 240); a sweep its limit
  # stops keeps what it judged. Then every benchmark's bound of the shipped problems and of
  # those levels' problems (scripts/sol_bounds.py, line by line) in the time left; with RATE=1,
  # ray-rate after it.
  root=${KB_ROOT:?sol needs KB_ROOT} levels=${KB_LEVELS:-1 2} sweep_s=${SWEEP_S:-240}
  read -ra level_list <<<"$levels"
  for level in "${level_list[@]}"; do
    subset=$state/sol-subset/level$level
    mkdir -p "$subset/problems/level$level" "$subset/solutions/level$level"
    for n in $(seq 1 "${SOL_STEP:-7}" 100); do
      for file in "$root"/problems/level"$level"/"${n}"_*.py \
        "$root/solutions/level$level/level_${level}_problem_${n}_sample_0_kernel.py"; do
        [ -f "$file" ] && ln -sf "$PWD/$file" "$subset/${file#"$root"/}"
      done
    done
    timeout "${BUILD_S:-200}" $python run.py --problems "$subset/problems/level$level" \
      --solutions "$subset/solutions/level$level" --build-only --build-jobs 8 \
      >"$out/sol-build-$level.txt" 2>&1 &
  done
  wait && echo "sol builds done at $SECONDS s" | tee -a "$out/summary.txt"
  for level in "${level_list[@]}"; do
    subset=$state/sol-subset/level$level
    step "sol-sweep-$level" $((sweep_s / ${#level_list[@]})) $python run.py \
      --problems "$subset/problems/level$level" --solutions "$subset/solutions/level$level" \
      --budget-ms 200 --results-dir "$state/sol-kb"
  done
  kb_dirs=() && for level in "${level_list[@]}"; do kb_dirs+=("$root/problems/level$level"); done
  step sol-bounds $((budget - SECONDS - (${RATE:-0} == 1 ? 150 : 10))) $python \
    scripts/sol_bounds.py problems "${kb_dirs[@]}" --csv "$out/sol-bounds.csv"
  if [ "${RATE:-}" = 1 ]; then
    ray_rate
  fi
else  # sanitize
  for solution in multilabel_margin/fast_cuda multilabel_margin/warp_cuda smooth_l1/fast_cuda; do
    step "memcheck-${solution//\//-}" 120 compute-sanitizer --tool memcheck --error-exitcode 9 \
      $python scripts/run_cases.py "${solution%%/*}" "solutions/$solution.py"
  done
fi

echo "after $part: $(gpu_state)" | tee -a "$out/machine.txt"
# The device tool returns at most 8 files from $OUT: builds stay behind, and when the step
# outputs are many they travel in one archive beside the summary.
tar czf "$out/results.tar.gz" --exclude='*builds*' --exclude='*.so' --exclude=kb-site -C "$state" .
[ -d logs ] && tar czf "$out/logs.tar.gz" logs
if [ "$(ls "$out" | wc -l)" -gt 8 ]; then
  (cd "$out" && tar czf outputs.tar.gz --remove-files $(ls | grep -vE '^(summary.txt|results.tar.gz|logs.tar.gz)$'))
fi
