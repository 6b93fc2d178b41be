"""A KernelBench-style harness: find, build, check, time and record CUDA kernel solutions.

Modules, one concern each:
    discovery  find problems and solutions on disk
    loading    import a reference and read its optional extras (tolerances, cases, benchmarks)
    toolchain  CUDA_HOME, target architectures, per-solution build directories
    compare    decide whether two outputs agree, and say where they do not
    timing     CUDA-event and wall-clock timing, and the statistics of the samples
    worker     build, check and time one solution (runs inside a spawned process)
    isolate    spawn the worker with timeouts and turn any failure into a status
    machine    describe the machine a run happened on
    records    append run records and write files atomically
    report     render tables from the records
    progress   tell the user what a long step is doing
    session    run the solutions of a problem and record them (what run.py calls)
"""
