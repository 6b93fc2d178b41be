"""The verdicts a solution can get, and what each means (the README's table comes from here).

Every rule that rejects a solution, and every flag a table's row can carry, declared once:
its name, what it means, and the module that decides it.

A rejection names its rule in the row's detail (`[rule: late_work]`) and in the record's
`reason`; harness.measure.anticheat.reject refuses a name that is not here. The tables of
docs/anticheat.md (rules) and docs/results.md (flags) are rendered from these
(`markdown_table`), and tests/test_rules.py holds the pages, this registry and the code that
raises each rule equal.

Errors that reach the user as one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Name(str, Enum):
    """A name that is its own string: equal to it, hashed, printed and written to JSON as it
    (a record read back holds the plain string, which compares equal)."""

    def __str__(self) -> str:
        return str(self.value)


class Status(Name):
    """A solution's verdict (the record's and the row's `status`)."""

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


OK, INCORRECT, COMPILE_ERROR = Status.OK, Status.INCORRECT, Status.COMPILE_ERROR
LOAD_ERROR, RUNTIME_ERROR, CRASHED = Status.LOAD_ERROR, Status.RUNTIME_ERROR, Status.CRASHED
TIMEOUT, NO_GPU, PROBLEM_ERROR = Status.TIMEOUT, Status.NO_GPU, Status.PROBLEM_ERROR
REJECTED = Status.REJECTED

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


@dataclass(frozen=True)
class Rule:
    meaning: str
    decided_in: str  # the module that decides it, under harness/


class RuleName(Name):
    """A rule of fair measurement that rejects a solution (the record's `reason`)."""

    INPUT_MUTATED = "input_mutated"
    OUTPUT_ALIASES_INPUT = "output_aliases_input"
    NOT_A_TENSOR = "not_a_tensor"
    STREAM_SWITCHED = "stream_switched"
    LATE_WORK = "late_work"
    HARNESS_DATA_CHANGED = "harness_data_changed"
    NONDETERMINISTIC = "nondeterministic"
    TIMER_REPLACED = "timer_replaced"
    HARNESS_REPLACED = "harness_replaced"
    UNSEEN_WORK = "unseen_work"
    NO_OWN_KERNEL = "no_own_kernel"
    FIG_LEAF = "fig_leaf"
    PLANTED_MODULE = "planted_module"
    SANDBOX_NETWORK = "sandbox_network"
    SANDBOX_FILESYSTEM = "sandbox_filesystem"
    SANDBOX_PTRACE = "sandbox_ptrace"
    SANDBOX_PROCESSES = "sandbox_processes"
    SANDBOX_MEMORY = "sandbox_memory"
    TORCH_REPLACED = "torch_replaced"
    TIME_UNCONFIRMED = "time_unconfirmed"
    REPORT_UNCONFIRMED = "report_unconfirmed"
    EVIDENCE_MISSING = "evidence_missing"


class FlagName(Name):
    """A flag a table's row can carry."""

    WEAK_PROBLEM = "weak_problem"
    MOVED = "moved"
    ABOVE_CEILING = "above_ceiling"
    SYNCHRONIZES = "synchronizes"
    HOST_BOUND = "host_bound"
    LAUNCH_BOUND = "launch_bound"
    NOISY = "noisy"
    THROTTLED = "throttled"
    LOAD = "load"
    COMPILE_MISMATCH = "compile_mismatch"
    BELOW_SOL = "below_sol"
    SOL_PARTIAL = "sol_partial"
    SOL_UNSCORED = "sol_unscored"


REJECTIONS: dict[str, Rule] = {
    RuleName.INPUT_MUTATED: Rule(
        "a call wrote to one of its inputs (a solution must leave them unchanged)",
        "measure/anticheat.py, measure/gradients.py",
    ),
    RuleName.OUTPUT_ALIASES_INPUT: Rule(
        "an output shares memory with an input instead of being a new tensor",
        "measure/anticheat.py",
    ),
    RuleName.NOT_A_TENSOR: Rule(
        "an output is a subclass of torch.Tensor, not a plain tensor", "measure/anticheat.py"
    ),
    RuleName.STREAM_SWITCHED: Rule(
        "the call changed the current CUDA stream and left it changed", "measure/anticheat.py"
    ),
    RuleName.LATE_WORK: Rule(
        "an output changed after the call returned: work on another stream or thread, unseen "
        "by the timer",
        "measure/anticheat.py",
    ),
    RuleName.HARNESS_DATA_CHANGED: Rule(
        "a call changed tensors the harness holds: the inputs as drawn, or its copies of them",
        "measure/anticheat.py, measure/feeding.py",
    ),
    RuleName.NONDETERMINISTIC: Rule(
        "right on the first call, wrong on a second on the same inputs: a race, or an output "
        "kept from an earlier call",
        "measure/checking.py",
    ),
    RuleName.TIMER_REPLACED: Rule(
        "a clock, CUDA timing or synchronisation function, or a comparison of torch was replaced",
        "measure/anticheat.py",
    ),
    RuleName.HARNESS_REPLACED: Rule(
        "a function or class of the harness's own modules was replaced", "measure/anticheat.py"
    ),
    RuleName.UNSEEN_WORK: Rule(
        "the wall clock saw more time per call than the timer: work the timer did not see",
        "measure/feeding.py",
    ),
    RuleName.NO_OWN_KERNEL: Rule(
        "on a GPU, the solution launched no kernel of its own: the work is PyTorch's",
        "measure/profiling.py",
    ),
    RuleName.FIG_LEAF: Rule(
        "the solution re-ran every kernel of the reference beside a small one of its own",
        "measure/profiling.py",
    ),
    RuleName.PLANTED_MODULE: Rule(
        "the solution left a module where later processes import from", "run/staging.py"
    ),
    RuleName.SANDBOX_NETWORK: Rule(
        "in the sandbox, the solution tried to connect, bind or send on an internet socket",
        "sandbox.py",
    ),
    RuleName.SANDBOX_FILESYSTEM: Rule(
        "in the sandbox, the solution opened or changed a path it may not reach (results, "
        "logs, builds, other solutions; for writing, anything outside its scratch folder)",
        "sandbox.py",
    ),
    RuleName.SANDBOX_PTRACE: Rule(
        "in the sandbox, the solution tried to trace or read another process",
        "sandbox.py",
    ),
    RuleName.SANDBOX_PROCESSES: Rule(
        "in the sandbox, the solution started half its process limit (--max-processes)",
        "sandbox.py",
    ),
    RuleName.SANDBOX_MEMORY: Rule(
        "in the sandbox, the solution ran out of its heap limit (--memory-gb)",
        "run/staging.py",
    ),
    RuleName.TORCH_REPLACED: Rule(
        "a function or method of torch was replaced (the reference runs in its referee, whole)",
        "measure/anticheat.py",
    ),
    RuleName.TIME_UNCONFIRMED: Rule(
        "the harness's clock, outside the solution's process, saw its timed calls take more "
        "than the times it reported account for",
        "run/refereeing.py",
    ),
    RuleName.REPORT_UNCONFIRMED: Rule(
        "the worker reported what the harness did not see happen: a row it did not time "
        "under the harness's direction, or an answer out of the protocol",
        "run/refereeing.py, run/rounds.py",
    ),
    RuleName.EVIDENCE_MISSING: Rule(
        "an ok was reported, but the output of a check never reached the referee",
        "run/refereeing.py",
    ),
}

FLAGS: dict[str, Rule] = {
    FlagName.WEAK_PROBLEM: Rule(
        "the problem's audit found that a wrong solution could pass it (zeros, a constant, a "
        "memorised output, a random or nondeterministic reference): judged, but its verdict "
        "proves less",
        "measure/audit.py",
    ),
    FlagName.MOVED: Rule(
        "under ncu the call moved less than the problem's minimum bytes: skipped work, or a "
        "wrong byte count",
        "results/report.py",
    ),
    FlagName.ABOVE_CEILING: Rule(
        "faster than the GPU's copy bandwidth allows: a warm cache, a wrong byte count, or "
        "skipped work",
        "results/report.py",
    ),
    FlagName.SYNCHRONIZES: Rule(
        "a side waits for the device in each call (timed with its synchronisation)",
        "measure/timing.py",
    ),
    FlagName.HOST_BOUND: Rule(
        "the per-call and device speedups part by more than 10%: the side named is host-bound",
        "measure/benchmarking.py",
    ),
    FlagName.LAUNCH_BOUND: Rule(
        "a side's time is near the timer's launch floor (try --graph)", "measure/benchmarking.py"
    ),
    FlagName.NOISY: Rule(
        "a side's relative standard error ended above 1% (the stop reason says why it stopped)",
        "results/report.py",
    ),
    FlagName.THROTTLED: Rule("the GPU throttled during the row's samples", "measure/hardware.py"),
    FlagName.LOAD: Rule(
        "the machine was busy when the row was timed (load, other GPU processes)",
        "results/load.py",
    ),
    FlagName.COMPILE_MISMATCH: Rule(
        "torch.compile's output differs from eager's, so there is no 'vs compile'",
        "results/report.py",
    ),
    FlagName.BELOW_SOL: Rule(
        "faster than the speed of light (the problem's bytes at the copy bandwidth, its FLOPs "
        "at their precision's peak): skipped work, a warm cache, or a lower precision than "
        "the reference's",
        "results/report.py",
    ),
    FlagName.SOL_PARTIAL: Rule(
        "the speed-of-light bound misses work the FLOP counter cannot see (a custom or "
        "recurrent op), or the GPU's peak for the precision is unknown",
        "measure/hardware.py",
    ),
    FlagName.SOL_UNSCORED: Rule(
        "no SOL score: the baseline (eager PyTorch) is not slower than the speed of light, so "
        "the score's scale has no length; the share of the bound still stands",
        "results/report.py",
    ),
}


def markdown_table(rules: dict[str, Rule], what: str) -> str:
    """`rules` as a markdown table whose first column is headed `what`."""
    lines = [f"| {what} | meaning | decided in |", "|---|---|---|"]
    for name, rule in rules.items():
        places = ", ".join(f"`harness/{place}`" for place in rule.decided_in.split(", "))
        lines.append(f"| `{name}` | {rule.meaning} | {places} |")
    return "\n".join(lines)


class UserError(Exception):
    """Bad input from the user: an unknown problem, a malformed file, a bad flag.

    The message is one line that says what is wrong and how to fix it; run.py prints it
    without a traceback and exits with EXIT_INPUT.
    """


class ProblemRefused(UserError):
    """A problem the run cannot judge, for a fault of its own: its file does not load, its
    reference fails, or --strict-audit refuses it. A sweep records each of its solutions as
    `problem_error`, not judged, so that its summary counts them."""


class HarnessError(Exception):
    """The harness itself failed (a folder it cannot write, a bug of its own), not the solution
    it was running: the run stops with this one line, keeping what was recorded before it, and
    records no verdict against the solution."""


class Verdict(Exception):
    """Ends a worker's job early with a status, a one-line detail and, for a broken rule of
    fair measurement (status "rejected"), the rule's short name (`reason`)."""

    def __init__(self, verdict: str, detail: str, reason: str | None = None) -> None:
        super().__init__(detail)
        self.status = verdict
        self.detail = detail
        self.reason = reason
