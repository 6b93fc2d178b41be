"""A KernelBench-style harness: find, build, check, time and record CUDA kernel solutions.

The folders say where code runs; tests/test_layout.py holds every import to this plan:

run/       the parent process, one per run.py: finds the work and drives it
    flags      every flag of run.py and every exit status, declared once; -h needs no torch;
               the settings they make, resolved
    processes  process trees: what a run or a job started ends with it (SIGTERM as Ctrl-C);
               the pool's builds held still (SIGSTOP) while a timing runs
    driving    run.py's runs: which problems and solutions, on which pool, what is printed;
               --render and --forget
    scheduler  many solutions of many problems at once: builds in a pool, judging on each slot;
               --resume: what is already recorded for the same solution, toolchain, settings
    pool       this host's pool: builds in worker processes, one judging slot per device
    raypool    the same on a Ray cluster (run.py --ray): CPU tasks build, one actor per GPU;
               a build and a log sent between the cluster's hosts
    reporting  what a run tells the user while the scheduler works
    progress   tell the user what a long step is doing
    session    run the solutions of a problem, each in a worker, and record each result
    auditing   the audits of a run's problems: on a GPU all in one worker, warnings and refusals;
               their answers kept across runs in the build cache, by the reference's content
    isolate    spawn the worker with time limits and turn any failure into a status; a spare
               worker started ahead of its job
    refereeing  the verdict from evidence the worker cannot write: its referee started, the
               checks' outputs compared there, every timed row replaced by what the parent kept
    rounds     the timing rounds the parent directs between referee and worker, its clock
               around each, and the rule a bare batch of the solution's calls must keep
    staging    the parent's side of the sandbox: each worker started through the launcher,
               its job staged into a scratch folder and out; modules a solution planted,
               removed
    discovery  find problems and solutions on disk; a static scan of a solution's source, as
               warnings
    machine    describe the machine a run happened on, and its load as each solution starts
    ncu        --ncu: have Nsight Compute count the bytes one call moves, as a witness
    replay     the command that replays a failed solution on the case it failed on
    evaluator  the harness from Python: a solution or a batch judged as a run, typed results
    service    run.py --serve: submissions over HTTP (FastAPI), judged in batches; the page
    submissions  the service's queue in SQLite: kept across restarts, judged exactly once
measure/   the worker process, one per solution: builds, checks and times it
    worker     load, check and time one solution (the worker's entry point); a spare worker
               started ahead of its job
    referee    the reference's side of a judging, in a process no solution enters: the
               checks' outputs compared, the reference timed in rounds the parent directs
    directed   what the worker and the referee say to the parent in those rounds (one side
               each), and the checks' outputs a worker leaves for the referee
    builds     watch the extension builds a solution makes; the light headers (ATen's operator
               headers, <torch/types.h>);
               a compiler error pointed at the solution's .py
    pch        PyTorch's extension header, precompiled once for every build
    triton_builds  each compile of a solution's Triton kernels framed as a build; its errors
               pointed at the solution's line; a Triton solution on the CPU is no_gpu
    checking   build Model and ModelNew alike and check every case, in the reference's mode
    audit      find where a zero, constant or memorised answer would pass a problem (flagged),
               and refuse a problem whose reference fails; those answers, built and read
               without output-sized memory
    kernelbench  --as kernelbench: KernelBench's criterion and timer, reproduced
    gradients  the backward of a BACKWARD problem: every input's and parameter's gradient;
               the backward passes timed for it
    anticheat  the rules each inspected call must keep (inputs, aliasing, late work, poison);
               clocks, timers and the harness's functions left unreplaced
    feeding    fresh inputs for every timed call, and spot checks of timed outputs; the
               wall-clock cross-check after the timing: work the timer did not see
    profiling  the profiler's check that a solution runs kernels of its own, not as a fig leaf
    benchmarking  time each benchmark shape: the solution and eager PyTorch side by side; the
               calls the timer samples; each call timed from an idle device too
    compiled   the torch.compile baseline: eager and the compiled reference side by side
    timing     sample calls side by side under the stopping rule; CUDA-event and wall timers
    hardware   bytes and FLOPs a problem must move, the GPU's copy-bandwidth ceiling; SM
               clock, temperature, throttling, other processes through NVML (read only)
    witness    the one call that ncu counts, in a process of its own (run.py --ncu)
results/   reads recorded files only (no GPU, no worker): what people read
    report     a problem's tables (markdown and CSV): their columns, each row's flags, which
               record of each solution a table shows
    sol        a row's speed of light: T_SOL, the share of it reached, the SOL score
    summary    the summary across problems (scores, best per problem, fast_p)
    console    the compact table a run prints when it ends, its long notes as footnotes
    chart      a problem's speedups drawn as an SVG (with matplotlib), deterministic bytes
    comparison compare two recorded runs, shape by shape: time and speedup ratios, verdicts
    load       the machine's load a run was timed under, and when a row is flagged for it
    baselines  the torch.compile baseline cache, per GPU and torch version
    page       the folder's results as one HTML page (index.html): the summary, each
               problem's table sortable, the charts, two runs compared, live submissions
    rendering  a results folder re-rendered from its run log: tables, charts, summary, page

Shared by all three, importing no wing:
    job        the job contract, without torch: what the parent asks of a worker (`Job`),
               what it tells the parent while it works, and what the job ended with (`Judged`)
    settings   the run's settings: declared once, made from the flags, carried whole
    toolchain  the build side: CUDA_HOME, target architectures, per-solution build folders
               keyed by content and toolchain, the environment torch's builder reads
    tolerance  how close an output must come: the harness's rule (bounds by dtype, their
               precedence, the float64 part's constants) and KernelBench's table, decided once
    record     the typed record of a run and its benchmark rows; writes and reads the run log
    codec      dataclasses to JSON and back, for the run log, the worker's messages, the specs;
               locked folders, atomic writes, JSON-lines logs
    loading    import a reference and read its optional extras (tolerances, cases, benchmarks);
               seeded inputs (one seed plan), copied with their exact layout to each side
    matching   whether two outputs match under harness.tolerance's rule, and where not
    accuracy   the accuracy rule: errors against the reference run in float64, and its own;
               a tensor read a block at a time (bounded temporaries for outputs of any size)
    stats      a call's raw timings; intervals for medians and speedups, relative standard
               error, geometric mean; where a worker's seconds go (named parts of judging)
    sandbox    the sandbox's policy, and the launcher that closes the doors before a worker
               starts; Landlock's three system calls; in the worker, the audit hook that
               names the rule each attempt meets
    verdicts   the verdicts and what each means, every rejection rule and row flag, the
               one-line errors that reach the user
"""
