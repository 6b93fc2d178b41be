"""A KernelBench-style harness: find, build, check, time and record CUDA kernel solutions.

Modules, one concern each:
    discovery  find problems and solutions on disk
    loading    import a reference and read its optional extras (tolerances, cases, benchmarks)
    inputs     seeded inputs, copied with their exact layout to each side
    toolchain  CUDA_HOME, target architectures, per-solution build folders
    builds     watch the extension builds a solution makes (inside the worker)
    compare    decide whether two outputs agree, and say where they do not
    checking   build Model and ModelNew alike and check every case
    anticheat  the rules each inspected call must keep (inputs, aliasing, late work, poison)
    feeding    fresh inputs for every timed call, and spot checks of timed outputs
    integrity  notice a solution replacing the clocks, timers or the harness's functions
    profiling  the profiler's check that a solution runs kernels of its own
    scan       a static scan of a solution's source, as warnings
    audit      reject problems a zero, constant or memorised answer would pass
    timing     the stopping rule: sample calls side by side; CUDA-event and wall-clock timers
    stats      intervals for medians and speedups, relative standard error, geometric mean
    benchmarking  time each benchmark shape (solution vs eager, or the torch.compile baseline)
    roofline   bytes and FLOPs a problem must move, and the GPU's copy-bandwidth ceiling
    gpustate   SM clock, temperature and throttling through NVML (read, never set)
    baselines  the torch.compile baseline cache, per GPU and torch version
    worker     load, check and time one solution (runs inside a spawned process)
    isolate    spawn the worker with time limits and turn any failure into a status
    status     the verdicts and what each means
    machine    describe the machine a run happened on
    records    append run records and write files atomically
    report     render tables from the records
    rendering  re-render a results folder (tables, charts, summary) from its recorded files
    summary    the summary across problems: scores, best per problem, fast_p
    diff       compare two recorded runs, shape by shape, with verdicts from intervals
    charts     draw a problem's speedups as an SVG (when matplotlib is installed)
    progress   tell the user what a long step is doing
    session    run the solutions of a problem and record them (what run.py calls)
    errors     the one-line errors that reach the user, and the worker's verdicts
"""
