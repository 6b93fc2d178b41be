"""The verdicts a solution can get, and what each means (the README's table comes from here)."""

OK = "ok"
INCORRECT = "incorrect"
COMPILE_ERROR = "compile_error"
LOAD_ERROR = "load_error"
RUNTIME_ERROR = "runtime_error"
CRASHED = "crashed"
TIMEOUT = "timeout"
NO_GPU = "no_gpu"
PROBLEM_ERROR = "problem_error"
REJECTED = "rejected"

MEANING = {
    OK: "built, correct on every case and trial, and timed",
    INCORRECT: "ran, but an output differs from the reference (the detail says where)",
    REJECTED: "broke a rule of fair measurement (changed its inputs, worked after returning, "
    "replaced a timer, ...): the detail names the rule",
    COMPILE_ERROR: "an extension failed to build (the detail has the compiler's first error)",
    LOAD_ERROR: "importing the file or constructing ModelNew raised, or its ModelNew is not a "
    "class (a syntax error or no top-level ModelNew is refused before any build: exit 3, no row)",
    RUNTIME_ERROR: "ModelNew raised while running (a CUDA error such as an illegal address too)",
    CRASHED: "the worker process died: a segfault, a kill, os._exit or sys.exit",
    TIMEOUT: "a step (build, check or timing) ran past its time limit and was killed",
    NO_GPU: "a CUDA solution on a machine without a GPU: compiled (or not), not run",
    PROBLEM_ERROR: "not judged: the reference itself failed (its get_inputs or Model raised, in "
    "the run or its audit), or --strict-audit refused the problem; the detail says which",
}

# Statuses that do not fail a run: a CUDA solution cannot run without a GPU.
PASSING = frozenset({OK, NO_GPU})
