"""A KernelBench-style harness: find, build, check, time and record CUDA kernel solutions.

Modules, one concern each:
    discovery  find problems and solutions on disk
    loading    import a reference and read its optional extras (tolerances, cases, benchmarks)
    inputs     seeded inputs, copied with their exact layout to each side
    toolchain  CUDA_HOME, target architectures, per-solution build folders
    builds     watch the extension builds a solution makes (inside the worker)
    compare    decide whether two outputs agree, and say where they do not
    checking   build Model and ModelNew alike and check every case
    timing     CUDA-event and wall-clock timing, and the statistics of the samples
    worker     load, check and time one solution (runs inside a spawned process)
    isolate    spawn the worker with time limits and turn any failure into a status
    status     the verdicts and what each means
    machine    describe the machine a run happened on
    records    append run records and write files atomically
    report     render tables from the records
    progress   tell the user what a long step is doing
    session    run the solutions of a problem and record them (what run.py calls)
    errors     the one-line errors that reach the user
"""
