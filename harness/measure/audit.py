"""Audit a problem before it is run: say where a wrong solution could pass it.

A correctness check is only as strong as the reference's outputs. If they are all but zero, a
solution returning zeros passes; if they are one constant, returning that constant passes; if
they do not change with the seed, returning a memorised output passes (the inputs ignore the
seed, or the output moves less than the tolerance when they change); if every case has the
same input shape, a solution hard-coded to that shape passes; if they change with torch's
random seed alone (Dropout in training mode), a kernel matches them only by drawing PyTorch's
random numbers in its order. The audit runs the reference (never a solution) the way
measure/checking.py does, in the mode its constructor left it and with torch seeded before each
call, and says which of these holds, each with how to fix the problem file.

Such a problem is still judged (its findings are WEAK: the run names them, and flags its rows,
harness.run.auditing); only a reference that fails refuses the problem (REJECT), and under
--strict-audit the weaknesses in STRICT_REFUSES too. The checks hold at most two outputs at a
time and compare them a block at a time (harness.accuracy), so any output the device holds fits.

The value checks (zero_passes, constant, seed_independent) judge the default case, on every
seed: every problem has it, it is also the first benchmark (so a shortcut there would be timed
as a speedup), and it is never an edge case. Extra cases often are edge cases whose answer is
meant to be trivial (the sum of an empty tensor is 0), so they are run on the first seed only,
for errors and a nondeterministic reference. Invalid cases and benchmarks are not run: the
reference refuses the former, and the latter can be huge.

The trivial answers a weak problem lets pass, as the audit builds and
reads them: zeros and a constant of an output's structure, shapes and dtypes, each an expanded
0-d tensor, so that no output-sized memory is held; and what the audit reads of an output (its
kind, whether it holds any value, its largest |value|, a block at a time).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from harness.accuracy import blocks
from harness.job import Audited
from harness.loading import (
    Case,
    Problem,
    load_problem,
    make_init_inputs,
    make_inputs,
    seed_everything,
)
from harness.matching import describe_tolerance, excess, leaves, mismatch
from harness.measure import anticheat, checking
from harness.measure.checking import call, describe_error
from harness.record import Finding
from harness.tolerance import DTYPE_DEFAULT, Tolerance, allowed

REJECT = "reject"  # the problem cannot be judged (its reference fails): the run refuses it
WEAK = "weak"  # a wrong solution could pass it: it is judged, and its rows are flagged
WARN = "warn"  # the problem is weaker than it could be: said on the console, nothing more
# The weaknesses a run refuses under --strict-audit (what it refused before it judged them)
STRICT_REFUSES = frozenset({"zero_passes", "constant", "seed_independent", "insensitive", "random"})
RANDOM_SEED_STEP = 1_000_003  # torch's seed for the run that tells a random reference
Shapes = tuple[tuple[int, ...], ...]  # the shapes of a case's tensor inputs, in order


@dataclass(frozen=True)
class SeedRun:
    """What the value checks need of one seed's output, found as it is made (so that one
    output besides the first is held at a time)."""

    judged: bool  # the output is of a kind the checks can judge (`supported`)
    zeros_pass: bool  # returning zeros would pass
    peak: float  # the largest finite |value|
    zero_excess: float  # ... as a share of what the tolerance allows there (`excess`)
    fill: Any  # each tensor's one value (`constant`), 0-d
    near_constant: bool  # returning `fill` would pass
    constant_excess: float
    same_as_first: bool  # returning the first seed's output would pass
    first_excess: float
    same_inputs: bool  # the inputs are the first seed's, bit for bit


@dataclass(frozen=True)
class CaseRun:
    """The reference run on one case: the first seed's output, what the value checks need of
    each seed's, the input shapes, a rerun's report."""

    first: Any
    seeds: list[SeedRun]
    shapes: Shapes
    rerun_report: str | None  # mismatch() of a second run on the first seed's inputs
    random_report: str | None = None  # ... of a run on them with torch seeded otherwise
    random_modules: list[str] = field(default_factory=list)  # checking.random_modules


class ProblemFailed(Exception):
    """The problem's own code raised; the message is one line naming the step."""


def audit_problem(
    problem: Problem,
    device: torch.device,
    override: Tolerance = DTYPE_DEFAULT,
    seeds: tuple[int, ...] = (1, 2, 3),
) -> list[Finding]:
    """Run the reference on the problem's valid cases and return what is wrong, if anything;
    each case is judged with the tolerance the checks would use (harness.tolerance.allowed,
    `override` being the command line's)."""
    if len(set(seeds)) < 2:
        raise ValueError(f"the audit needs two different seeds at least, not {seeds}")
    findings = []
    default_shapes: Shapes | None = None
    other_shapes = []
    for index, case in enumerate(problem.cases):
        if case.invalid:
            continue
        bounds = allowed(problem, case, override)
        try:
            run = run_case(problem, case, device, seeds if index == 0 else seeds[:1], bounds)
        except ProblemFailed as failure:
            findings.append(Finding(REJECT, "error", case.name, str(failure)))
            continue
        if run.random_report and not run.rerun_report:
            findings.append(random_finding(case.name, run))
        if run.rerun_report:
            findings.append(
                Finding(
                    WEAK,
                    "nondeterministic",
                    case.name,
                    f"two runs of the reference on the same inputs (seed {seeds[0]}) differ: "
                    f"{run.rerun_report}; a correct solution may fail: make the reference "
                    "deterministic or loosen ATOL/RTOL",
                )
            )
        if index == 0:
            default_shapes = run.shapes
            finding = judge_values(case.name, run, seeds, bounds)
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
    """The reference's output on each seed, as harness/measure/checking.py builds and calls it.

    The model is built once from the first seed and then fed each seed's inputs, as a case's
    trials are. On the first seed the reference runs twice, to see whether it repeats itself.
    Of the other seeds' outputs only what the value checks need is kept (`observe`).
    """
    seed_everything(seeds[0])  # before get_init_inputs too: it may draw weights at random
    init_inputs = attempt("get_init_inputs()", make_init_inputs, case, device)
    model = attempt("Model(*init_inputs)", lambda: problem.model(*init_inputs).to(device))
    runs: list[SeedRun] = []
    first: Any = None
    drawn: tuple[Any, ...] = ()
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
                first, drawn = output, inputs_signature(inputs)
                shapes = tuple(tuple(v.shape) for v in inputs if isinstance(v, torch.Tensor))
                if supported(output):
                    rerun_report = mismatch(output, run(inputs, seed), allowed)
                    random_report = mismatch(output, run(inputs, seed + RANDOM_SEED_STEP), allowed)
            same_inputs = inputs_signature(inputs) == drawn
            del inputs
            runs.append(observe(output, first, same_inputs, allowed))
            del output
    return CaseRun(first, runs, shapes, rerun_report, random_report, checking.random_modules(model))


def inputs_signature(inputs: list[Any]) -> tuple[Any, ...]:
    """What tells two seeds' inputs apart: each tensor's fingerprint (harness.measure.anticheat),
    each other input as it is."""
    tensors = anticheat.fingerprint(inputs)
    return (tensors, tuple(repr(v) for v in inputs if not isinstance(v, torch.Tensor)))


def observe(output: Any, first: Any, same_inputs: bool, allowed: Tolerance) -> SeedRun:
    """What the value checks need of one seed's `output` (`first` being the first seed's)."""
    if not supported(output) or not has_values(output):
        return SeedRun(False, False, 0.0, 0.0, None, False, 0.0, False, 0.0, same_inputs)
    nothing, filled = zeros(output), constant(output)
    spread_fill = expanded(filled, output)
    return SeedRun(
        judged=True,
        zeros_pass=mismatch(output, nothing, allowed) is None,
        peak=max_abs(output),
        zero_excess=excess(output, nothing, allowed),
        fill=filled,
        near_constant=mismatch(output, spread_fill, allowed) is None,
        constant_excess=excess(output, spread_fill, allowed),
        same_as_first=mismatch(first, output, allowed) is None,
        first_excess=excess(first, output, allowed),
        same_inputs=same_inputs,
    )


def random_finding(case: str, run: CaseRun) -> Finding:
    """The reference's output changes with torch's seed alone: a random reference (Dropout
    with p > 0 in training mode), which a kernel can match only by drawing PyTorch's random
    numbers in PyTorch's order (the checks seed torch before each call, as KernelBench does)."""
    named = ", ".join(run.random_modules) or "a random operation in forward()"
    return Finding(
        WEAK,
        "random",
        case,
        f"the reference's output on the same inputs changes with torch's random seed ({named}, "
        f"in training mode): {run.random_report}; a solution can match it only by drawing "
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
    case: str, run: CaseRun, seeds: tuple[int, ...], allowed: Tolerance
) -> Finding | None:
    """The strongest of zero_passes, constant and seed_independent (or insensitive) that holds.

    Each implies the next (zeros are a constant; a constant is the same on every seed), so only
    the strongest is reported: it names the cheapest output that would pass. The last is told
    apart by its cause: inputs that ignore the seed (seed_independent), or inputs that change
    with it and an output that moves less than the tolerance (insensitive).
    """
    each = run.seeds
    if not all(seed.judged for seed in each):
        return None
    on_seeds = f"on seeds {', '.join(str(seed) for seed in seeds)}"
    shown = describe_tolerance(allowed, run.first)
    if all(seed.zeros_pass for seed in each):
        peak = max(seed.peak for seed in each)
        share = max(seed.zero_excess for seed in each)
        return Finding(
            WEAK,
            "zero_passes",
            case,
            f"every value is within the tolerance of zero {on_seeds} (max |value| {peak:.3g}, "
            f"{_share(share, shown)}), so returning zeros passes: use larger inputs or values, "
            "or a tighter ATOL",
        )
    fills = [seed.fill for seed in each]
    if all(seed.near_constant for seed in each) and all(
        mismatch(fills[0], fill, allowed) is None for fill in fills[1:]
    ):
        values = ", ".join(format_value(value) for value in first_values(fills[0]))
        share = max(seed.constant_excess for seed in each)
        return Finding(
            WEAK,
            "constant",
            case,
            f"the output is the constant {values} {on_seeds} (it strays from it by at most "
            f"{_share(share, shown)}), so returning that constant passes: choose inputs that "
            "the output depends on",
        )
    if not all(seed.same_as_first for seed in each[1:]):
        return None
    if all(seed.same_inputs for seed in each):
        return Finding(
            WEAK,
            "seed_independent",
            case,
            f"the inputs are the same {on_seeds}: they ignore the seed, so a solution could "
            "return a memorised output: draw them from torch, numpy or random (torch.randn, "
            "say)",
        )
    share = max(seed.first_excess for seed in each[1:])
    return Finding(
        WEAK,
        "insensitive",
        case,
        f"the inputs change with the seed but the output barely does: {on_seeds} it moves "
        f"by at most {_share(share, shown)}, so a solution could return a memorised output: "
        "make the output depend more on the inputs, or tighten ATOL/RTOL",
    )


def _share(share: float, shown: str) -> str:
    """A share of what the tolerance allows, as the findings say it: '0.31x what the
    tolerance atol=0.0001 rtol=0.0001 allows' (1x is its edge)."""
    what = "exact equality" if shown == "exact equality" else f"the tolerance {shown}"
    return f"{share:.2g}x what {what} allows"


def refused(findings: list[Finding], strict: bool = False) -> bool:
    """Whether the findings refuse the problem: its reference fails, or, with `strict`
    (--strict-audit), a weakness that a trivial answer passes (STRICT_REFUSES)."""
    return any(finding_refuses(finding, strict) for finding in findings)


def finding_refuses(finding: Finding, strict: bool = False) -> bool:
    return finding.level == REJECT or (strict and finding.check in STRICT_REFUSES)


def render_findings(problem_name: str, findings: list[Finding]) -> str:
    """Lines for the CLI: '<name>: ok', or one line per finding, rejects first, then
    weaknesses."""
    if not findings:
        return f"{problem_name}: ok"
    lines = []
    for finding in sorted(findings, key=lambda f: LEVELS.index(f.level)):
        where = f" (case {finding.case!r})" if finding.case is not None else ""
        lines.append(f"{problem_name}: {finding.level} {finding.check}{where}: {finding.message}")
    return "\n".join(lines)


LEVELS = (REJECT, WEAK, WARN)


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
    """What a solution returning zeros would return: same structure, shapes and dtypes (each
    tensor one zero, expanded: it holds no memory of the output's size)."""
    return replace_leaves(
        output,
        lambda x: (
            torch.zeros((), dtype=x.dtype, device=x.device).expand(x.shape)
            if isinstance(x, torch.Tensor)
            else type(x)(0)
        ),
    )


def constant(output: Any) -> Any:
    """Each tensor as one value, 0-d: its mean if floating, its most common value if not."""
    return replace_leaves(output, fill)


def expanded(fills: Any, output: Any) -> Any:
    """`fills` (`constant`'s) expanded to `output`'s shapes, as a solution returning them
    would return (views: no memory of the output's size)."""
    if isinstance(output, (tuple, list)):
        items = [expanded(f, o) for f, o in zip(fills, output, strict=True)]
        return items if isinstance(output, list) else tuple(items)
    if isinstance(output, torch.Tensor) and output.numel() > 0:
        return fills.expand(output.shape)
    return fills


def fill(x: Any) -> Any:
    if not isinstance(x, torch.Tensor):
        return x  # a number is its own constant: whether it changes is judged across seeds
    if x.numel() == 0:
        return x.clone()
    if x.is_complex():
        return torch.full((), x.mean().item(), dtype=x.dtype, device=x.device)
    if x.is_floating_point():  # the mean in float64, a block at a time
        total = sum(x[index].to(torch.float64).sum().item() for index in blocks(x.shape))
        return torch.full((), total / x.numel(), dtype=x.dtype, device=x.device)
    values, counts = torch.unique(x, return_counts=True)
    return torch.full((), values[counts.argmax()].item(), dtype=x.dtype, device=x.device)


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
    """The largest finite |value| in `output` (0 when there is none), a block at a time."""
    peak = 0.0
    for leaf in leaves(output):
        x = leaf.detach() if isinstance(leaf, torch.Tensor) else torch.tensor(leaf)
        if x.is_complex():
            x = torch.view_as_real(x)
        for index in blocks(x.shape):
            values = x[index].to(torch.float64).abs()
            values = values[torch.isfinite(values)]
            if values.numel():
                peak = max(peak, values.max().item())
    return peak
