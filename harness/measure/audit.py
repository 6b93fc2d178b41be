"""Audit a problem before it is run: reject a problem that a wrong solution could pass.

A correctness check is only as strong as the reference's outputs. If they are all but zero, a
solution returning zeros passes; if they are one constant, returning that constant passes; if
they do not change with the seed, returning a memorised output passes; if every case has the
same input shape, a solution hard-coded to that shape passes; if they change with torch's
random seed alone (Dropout in training mode), no honest kernel can match them. The audit runs
the reference (never a solution) the way harness/checking.py does, in the mode its constructor
left it and with torch seeded before each call, and says which of these holds, each with how to
fix the problem file.

The value checks (zero_passes, constant, seed_independent) judge the default case, on every
seed: every problem has it, it is also the first benchmark (so a shortcut there would be timed
as a speedup), and it is never an edge case. Extra cases often are edge cases whose answer is
meant to be trivial (the sum of an empty tensor is 0), so they are run on the first seed only,
for errors and a nondeterministic reference. Invalid cases and benchmarks are not run: the
reference refuses the former, and the latter can be huge.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from harness.inputs import make_init_inputs, make_inputs, seed_everything
from harness.loading import Case, Problem, load_problem
from harness.matching import (
    DTYPE_DEFAULT,
    Tolerance,
    describe_tolerance,
    leaves,
    mismatch,
    tolerance,
)
from harness.measure import modes
from harness.measure.checking import call, describe_error

REJECT = "reject"  # the problem is not worth solving: the run stops
WARN = "warn"  # the problem is weaker than it could be: the run goes on
RANDOM_SEED_STEP = 1_000_003  # torch's seed for the run that tells a random reference
Shapes = tuple[tuple[int, ...], ...]  # the shapes of a case's tensor inputs, in order


@dataclass(frozen=True)
class Finding:
    """One thing wrong with a problem, in one line: what is wrong and how to fix it."""

    level: str  # REJECT or WARN
    check: str  # zero_passes, constant, seed_independent, random, nondeterministic, one_shape,
    # error
    case: str | None  # the case it was found in; None for the problem as a whole
    message: str


@dataclass(frozen=True)
class CaseRun:
    """The reference run on one case: an output per seed, the input shapes, a rerun's report."""

    outputs: list[Any]
    shapes: Shapes
    rerun_report: str | None  # mismatch() of a second run on the first seed's inputs
    random_report: str | None = None  # ... of a run on them with torch seeded otherwise
    random_modules: list[str] = field(default_factory=list)  # modes.random_modules


class ProblemFailed(Exception):
    """The problem's own code raised; the message is one line naming the step."""


def audit_problem(
    problem: Problem,
    device: torch.device,
    override: Tolerance = DTYPE_DEFAULT,
    seeds: tuple[int, ...] = (1, 2, 3),
) -> list[Finding]:
    """Run the reference on the problem's valid cases and return what is wrong, if anything;
    each case is judged with the tolerance the checks would use (harness.matching.tolerance,
    `override` being the command line's)."""
    if len(set(seeds)) < 2:
        raise ValueError(f"the audit needs two different seeds at least, not {seeds}")
    findings = []
    default_shapes: Shapes | None = None
    other_shapes = []
    for index, case in enumerate(problem.cases):
        if case.invalid:
            continue
        allowed = tolerance(problem, case, override)
        try:
            run = run_case(problem, case, device, seeds if index == 0 else seeds[:1], allowed)
        except ProblemFailed as failure:
            findings.append(Finding(REJECT, "error", case.name, str(failure)))
            continue
        if run.random_report and not run.rerun_report:
            findings.append(random_finding(case.name, run))
        if run.rerun_report:
            findings.append(
                Finding(
                    WARN,
                    "nondeterministic",
                    case.name,
                    f"two runs of the reference on the same inputs (seed {seeds[0]}) differ: "
                    f"{run.rerun_report}; a correct solution may fail: make the reference "
                    "deterministic or loosen ATOL/RTOL",
                )
            )
        if index == 0:
            default_shapes = run.shapes
            finding = judge_values(case.name, run.outputs, seeds, allowed)
            if finding:
                findings.append(finding)
        else:
            other_shapes.append(run.shapes)
    if default_shapes and all(shapes == default_shapes for shapes in other_shapes):
        shown = " and ".join(str(shape) for shape in default_shapes)
        findings.append(
            Finding(
                WARN,
                "one_shape",
                None,
                f"every case has the default's input shapes {shown}, so a solution hard-coded "
                "to them passes: add CASES whose inputs have other sizes",
            )
        )
    return findings


@dataclass(frozen=True)
class Audited:
    """One problem's audit: its findings, or why it could not be audited."""

    findings: tuple[Finding, ...] = ()
    error: str | None = None


def audit_each(
    sources: Sequence[tuple[str, str]], device: torch.device, override: Tolerance = DTYPE_DEFAULT
) -> dict[str, Audited]:
    """Audit each (problem name, reference file) of `sources` in this process, by name."""
    answers: dict[str, Audited] = {}
    for name, reference in sources:
        try:
            findings = audit_problem(load_problem(name, Path(reference)), device, override)
            answers[name] = Audited(tuple(findings))
        except Exception as err:  # this problem's failure, not the others'
            answers[name] = Audited(error=describe_error(err))
    return answers


def run_case(
    problem: Problem,
    case: Case,
    device: torch.device,
    seeds: tuple[int, ...],
    allowed: Tolerance,
) -> CaseRun:
    """The reference's output on each seed, as harness/checking.py builds and calls it.

    The model is built once from the first seed and then fed each seed's inputs, as a case's
    trials are. On the first seed the reference runs twice, to see whether it repeats itself.
    """
    seed_everything(seeds[0])  # before get_init_inputs too: it may draw weights at random
    init_inputs = attempt("get_init_inputs()", make_init_inputs, case, device)
    model = attempt("Model(*init_inputs)", lambda: problem.model(*init_inputs).to(device))
    outputs = []
    shapes: Shapes = ()
    rerun_report = random_report = None

    def run(inputs: list[Any], seed: int) -> Any:
        seed_everything(seed)  # as the checks do before each call
        return attempt("the reference Model", call, model, inputs, device)

    with torch.no_grad():
        for seed in seeds:
            inputs = attempt("get_inputs()", make_inputs, case, seed, device)
            output = run(inputs, seed)
            if seed == seeds[0]:
                shapes = tuple(tuple(v.shape) for v in inputs if isinstance(v, torch.Tensor))
                if supported(output):
                    rerun_report = mismatch(output, run(inputs, seed), allowed)
                    random_report = mismatch(output, run(inputs, seed + RANDOM_SEED_STEP), allowed)
            outputs.append(output)
    return CaseRun(outputs, shapes, rerun_report, random_report, modes.random_modules(model))


def random_finding(case: str, run: CaseRun) -> Finding:
    """The reference's output changes with torch's seed alone: a random reference (Dropout
    with p > 0 in training mode), which no kernel can match except by drawing PyTorch's random
    numbers in PyTorch's order."""
    named = ", ".join(run.random_modules) or "a random operation in forward()"
    return Finding(
        REJECT,
        "random",
        case,
        f"the reference's output on the same inputs changes with torch's random seed ({named}, "
        f"in training mode): {run.random_report}; a solution could match it only by drawing "
        "PyTorch's random numbers in PyTorch's order: call self.eval() in Model.__init__ if "
        "the problem means inference, or set p=0",
    )


def attempt(step: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Call `fn(*args)`; an exception becomes ProblemFailed with a one-line message."""
    try:
        return fn(*args)
    except Exception as err:
        raise ProblemFailed(f"{step} raised {describe_error(err)}") from err


def judge_values(
    case: str, outputs: list[Any], seeds: tuple[int, ...], allowed: Tolerance
) -> Finding | None:
    """The strongest of zero_passes, constant and seed_independent that holds, if any.

    Each implies the next (zeros are a constant; a constant is the same on every seed), so only
    the strongest is reported: it names the cheapest output that would pass.
    """
    if not all(supported(output) for output in outputs) or not has_values(outputs[0]):
        return None
    on_seeds = f"on seeds {', '.join(str(seed) for seed in seeds)}"
    shown = describe_tolerance(allowed, outputs[0])
    if all(mismatch(output, zeros(output), allowed) is None for output in outputs):
        peak = max(max_abs(output) for output in outputs)
        return Finding(
            REJECT,
            "zero_passes",
            case,
            f"every value is within the tolerance of zero {on_seeds} (max |value| {peak:.3g}, "
            f"tolerance {shown}), so returning zeros passes: use larger inputs or values, "
            "or a tighter ATOL",
        )
    fills = [constant(output) for output in outputs]
    each_seed = zip(outputs, fills, strict=True)
    near_constant = all(mismatch(output, fill, allowed) is None for output, fill in each_seed)
    if near_constant and all(mismatch(fills[0], fill, allowed) is None for fill in fills[1:]):
        values = ", ".join(format_value(value) for value in first_values(fills[0]))
        return Finding(
            REJECT,
            "constant",
            case,
            f"the output is the constant {values} {on_seeds} (within {shown}), so "
            "returning that constant passes: choose inputs that the output depends on",
        )
    if all(mismatch(outputs[0], output, allowed) is None for output in outputs[1:]):
        return Finding(
            REJECT,
            "seed_independent",
            case,
            f"the output is the same {on_seeds} (within {shown}): the inputs ignore the "
            "seed, so a solution could return a memorised output: draw them from torch, numpy "
            "or random (torch.randn, say)",
        )
    return None


def supported(output: Any) -> bool:
    """Whether the audit can judge `output`: a tensor, a number, or a tuple or list of them."""
    if isinstance(output, (tuple, list)):
        return all(supported(item) for item in output)
    return isinstance(output, (torch.Tensor, bool, int, float))


def has_values(output: Any) -> bool:
    """False when `output` holds no element at all (every tensor empty): nothing to judge."""
    return any(not isinstance(leaf, torch.Tensor) or leaf.numel() > 0 for leaf in leaves(output))


def replace_leaves(output: Any, fn: Callable[[Any], Any]) -> Any:
    """`output` with the same structure, each tensor or number `x` replaced by `fn(x)`."""
    if isinstance(output, (tuple, list)):
        items = [replace_leaves(item, fn) for item in output]
        return items if isinstance(output, list) else tuple(items)
    return fn(output)


def zeros(output: Any) -> Any:
    """What a solution returning zeros would return: same structure, shapes and dtypes."""
    return replace_leaves(
        output, lambda x: torch.zeros_like(x) if isinstance(x, torch.Tensor) else type(x)(0)
    )


def constant(output: Any) -> Any:
    """Each tensor filled with one value: its mean if floating, its most common value if not."""
    return replace_leaves(output, fill)


def fill(x: Any) -> Any:
    if not isinstance(x, torch.Tensor):
        return x  # a number is its own constant: whether it changes is judged across seeds
    if x.numel() == 0:
        return x.clone()
    if x.is_floating_point() or x.is_complex():
        mean = x.mean() if x.is_complex() else x.to(torch.float64).mean()
        return torch.full_like(x, mean.item())
    values, counts = torch.unique(x, return_counts=True)
    return torch.full_like(x, values[counts.argmax()].item())


def first_values(output: Any) -> list[Any]:
    """The first element of each non-empty tensor, and each number: a fill's values."""
    return [
        leaf.flatten()[0].item() if isinstance(leaf, torch.Tensor) else leaf
        for leaf in leaves(output)
        if not isinstance(leaf, torch.Tensor) or leaf.numel() > 0
    ]


def format_value(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, (float, complex)) else str(value)


def max_abs(output: Any) -> float:
    """The largest finite |value| in `output` (0 when there is none)."""
    peak = 0.0
    for leaf in leaves(output):
        x = leaf.detach() if isinstance(leaf, torch.Tensor) else torch.tensor(leaf)
        if x.is_complex():
            x = torch.view_as_real(x)
        x = x.to(torch.float64).abs()
        x = x[torch.isfinite(x)]
        if x.numel():
            peak = max(peak, x.max().item())
    return peak


def rejected(findings: list[Finding]) -> bool:
    """Whether any finding rejects the problem."""
    return any(finding.level == REJECT for finding in findings)


def render_findings(problem_name: str, findings: list[Finding]) -> str:
    """Lines for the CLI: '<name>: ok', or one line per finding, rejects first."""
    if not findings:
        return f"{problem_name}: ok"
    lines = []
    for finding in sorted(findings, key=lambda f: f.level != REJECT):
        where = f" (case {finding.case!r})" if finding.case is not None else ""
        lines.append(f"{problem_name}: {finding.level} {finding.check}{where}: {finding.message}")
    return "\n".join(lines)
