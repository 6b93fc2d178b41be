"""Check a solution against the reference: same seed, same inputs, outputs compared.

Model and ModelNew are built from the same seed, with the reference's matching parameters copied
into ModelNew, and run in the mode the reference's constructor left it (training, for an
nn.Module), under torch.no_grad(). Before every call of either model,
torch's generators are seeded with the trial's seed, as KernelBench does, so a solution that
draws random numbers as the reference does draws the same ones. Each trial draws fresh inputs
from a seed that mixes the public one with the run's secret (harness.loading.Seeds), so no
solution can know them in advance. On each, the solution runs twice, once before and once after
the reference, each time on its own copy of the inputs and with freed memory poisoned first;
the reference runs on a pristine copy. So no expected output exists yet when the solution first
runs, for it to find and return; and every tensor the harness holds during a solution call (the
pristine inputs; then the reference's copy, its output and the first output) must come out of
the call unchanged (fingerprinted, not copied: a copy could be found and changed too). Both
solution calls must keep the rules of harness.measure.anticheat and match the reference by the run's
criterion (`criterion`): within the bounds that harness.tolerance.allowed gives, or keeping
the accuracy rule against the reference run in float64 on the same inputs (harness.accuracy);
or, under `--as kernelbench`, KernelBench's allclose (harness.measure.kernelbench). Any failure
ends the check with a Verdict naming the case.

The mode a model runs in, and the modules whose meaning it changes.

Both models run in the mode their constructors leave them, as KernelBench runs them: an
`nn.Module` starts in training mode, so BatchNorm normalizes with the batch's own statistics
and Dropout zeroes elements at random. A problem meant for inference says so itself, by
calling `self.eval()` in `Model.__init__`; ModelNew is then put in the same mode
(`build_models`). This module names the modules whose output depends
on that mode, for a verdict that must say why a solution differs, and those that draw random
numbers, for the audit's rule on random references (harness.measure.audit).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.dropout import _DropoutNd
from torch.nn.modules.instancenorm import _InstanceNorm

from harness import accuracy, verdicts
from harness.loading import (
    Case,
    Problem,
    Seeds,
    make_init_inputs,
    make_inputs,
    replicate_all,
    seed_everything,
)
from harness.matching import mismatch
from harness.measure import anticheat, directed, gradients, kernelbench
from harness.settings import Checking
from harness.stats import part
from harness.tolerance import allowed
from harness.verdicts import HarnessError, Verdict

__all__ = ["Counted", "Verdict", "build_models", "check_cases", "check_once", "keeper"]

HELD = (
    "a tensor the harness held (its copies of the inputs, the expected output, or the first "
    "call's output: return a new tensor from each call)"
)

Counted = Callable[[int, int], None]  # (done, total): how far a step has come


def check_cases(
    problem: Problem,
    model_new: type,
    device: torch.device,
    checking: Checking,
    on_case: Callable[[str], None] = lambda name: None,
    counted: Counted | None = None,
) -> int:
    """Check every case (or only the one `checking.case` names) `checking.trials` times with
    fresh inputs (harness.loading.Seeds); return the number of checks made. `on_case` hears each
    case's name as its check starts, `counted` (done, total) after each check. A case keeps its
    index, so its seeds, when others are left out."""
    seeds = Seeds.of(checking)
    checks = 0
    chosen = [c for c in problem.cases if checking.case in (None, c.name)]
    for index, case in enumerate(problem.cases):
        if case not in chosen:
            continue
        on_case(case.name)
        models = build_models(problem, model_new, case, seeds.case(index), device)
        for trial in range(1, checking.trials + 1):
            trial_seed = seeds.trial(index, trial)
            inputs = guard(
                verdicts.PROBLEM_ERROR, "get_inputs", make_inputs, case, trial_seed, device
            )
            keep = keeper(directed.case_key(index, trial))
            verdict = check_once(problem, case, models, inputs, device, checking, trial_seed, keep)
            if not verdict and problem.backward and not case.invalid:
                with part("gradients"):
                    verdict = gradients.check(
                        problem, case, models, inputs, device, checking.tolerance, trial_seed
                    )
            if verdict:  # the trial's own seed, and what it comes from (harness.loading.Seeds)
                drawn = f"trial {trial}, from --seed {checking.seed} and --secret"
                where = f"case {case.name!r}, seed {trial_seed} ({drawn})"
                raise Verdict(verdicts.INCORRECT, f"{where}: {verdict}")
            checks += 1
            if counted:
                counted(checks, len(chosen) * checking.trials)
    return checks


def keeper(key: str) -> Callable[[Any], None] | None:
    """What keeps a check's first output as evidence `key`, in a directed worker; else None."""
    evidence = directed.EVIDENCE
    if evidence is None:
        return None
    return lambda output: evidence.keep(key, output)


def build_models(
    problem: Problem, model_new: type, case: Case, seed: int, device: torch.device
) -> tuple[Any, Any]:
    """Model and ModelNew from the same seed, with the reference's matching weights copied;
    ModelNew in the mode the reference's constructor left it in."""
    with part("models"):
        reference = build_model(problem.model, case, seed, device, dtype=problem.dtype)
        solution = build_model(
            model_new, case, seed, device, verdicts.LOAD_ERROR, "ModelNew", problem.dtype
        )
        solution.train(getattr(reference, "training", False))
        wanted = solution.state_dict()
        shared = {
            key: value
            for key, value in reference.state_dict().items()
            if key in wanted and wanted[key].shape == value.shape
        }
        solution.load_state_dict(shared, strict=False)
    return reference, solution


def build_model(
    cls: type,
    case: Case,
    seed: int,
    device: torch.device,
    failure: str = verdicts.PROBLEM_ERROR,
    label: str = "Model",
    dtype: torch.dtype | None = None,
) -> Any:
    """`cls(*init_inputs)` on `device`, its generators seeded with `seed` first; a failure is
    a Verdict of `failure` (the reference's: problem_error). With a `dtype` (--precision,
    harness.loading.at_precision), its floating-point parameters and buffers are cast to it;
    integer ones (BatchNorm's step count) stay as they are."""
    seed_everything(seed)  # before get_init_inputs too: it may draw weights at random
    args = guard(verdicts.PROBLEM_ERROR, "get_init_inputs", make_init_inputs, case, device)
    model = guard(failure, f"{label}(*init_inputs)", cls, *args)
    return model.to(device) if dtype is None else model.to(device, dtype)


def check_once(
    problem: Problem,
    case: Case,
    models: tuple[Any, Any],
    inputs: list[Any],
    device: torch.device,
    checking: Checking = Checking(),  # noqa: B008 (frozen: one shared default is safe)
    seed: int = 0,
    keep: Callable[[Any], None] | None = None,
) -> str | None:
    """None when the solution matches the reference on `inputs`, else the mismatch; a broken
    rule of harness.measure.anticheat raises a Verdict (see the module doc for the order of calls).
    `seed` seeds torch's generators before each call; `keep` is given the solution's first
    output (the evidence its referee compares: harness.measure.directed)."""
    with part("guards"):  # what the parts inside leave: fingerprints, copies, the rules
        return _check_once(problem, case, models, inputs, device, checking, seed, keep)


def _check_once(
    problem: Problem,
    case: Case,
    models: tuple[Any, Any],
    inputs: list[Any],
    device: torch.device,
    checking: Checking,
    seed: int,
    keep: Callable[[Any], None] | None,
) -> str | None:
    reference, solution = models
    label = f"case {case.name!r}"
    if case.invalid:
        return check_refused(solution, inputs, device, label)
    sizes = anticheat.output_sizes(inputs)
    drawn = anticheat.fingerprint(inputs)
    with torch.no_grad():
        first = solution_call(solution, inputs, device, label, sizes, seed)
        if keep is not None:
            keep(first.output)
        anticheat.require_unchanged(inputs, drawn, "the harness's copy of the inputs", label)
        given = replicate_all(inputs, device)
        seed_everything(seed)
        with part("reference"):
            expected = guard(
                verdicts.PROBLEM_ERROR, f"{label}: Model", call, reference, given, device
            )
        sizes += anticheat.output_sizes(expected)
        held = [inputs, given, expected, first.output]
        before = anticheat.fingerprint(held)
        second = solution_call(solution, inputs, device, label, sizes, seed)
        anticheat.require_unchanged(held, before, HELD, label)
    for made in (first, second):
        anticheat.check_call(made, inputs, given, label)
    differs = criterion(problem, case, checking, reference, inputs, device)
    with part("compare"):
        report = differs(expected, first.output)
    if report:
        return report + anticheat.poison_note(first.output) + training_note(reference)
    with part("compare"):
        report = differs(expected, second.output)
    if report:
        raise anticheat.reject(
            "nondeterministic",
            f"{label}: right on the first call, wrong on a second call on the same inputs "
            f"({report}): a race, or an output kept from an earlier call",
        )
    return None


Differs = Callable[[Any, Any], "str | None"]  # (expected, actual) -> the mismatch, or None


def criterion(
    problem: Problem,
    case: Case,
    checking: Checking,
    reference: Any,
    inputs: list[Any],
    device: torch.device,
) -> Differs:
    """How an output is compared with the reference's on `inputs`: the harness's tolerance and
    accuracy rule, or KernelBench's allclose under `--as kernelbench`."""
    if checking.profile == kernelbench.PROFILE and case is problem.cases[0]:
        return harness_run(
            lambda expected, actual: kernelbench.mismatch(
                expected, actual, checking.kernelbench_tolerance
            )
        )
    bounds = allowed(problem, case, checking.tolerance)
    exact = accuracy.Exact(reference, inputs, device)  # run only if the bounds reject
    return harness_run(lambda expected, actual: mismatch(expected, actual, bounds, exact))


def harness_run(differs: Differs) -> Differs:
    """`differs`, whose failure is the harness's (HarnessError: an output too large for its
    comparison's memory, say), never the solution's; except a CUDA error other than running
    out of memory, which only a fault of the solution's kernels leaves in the context."""

    def compared(expected: Any, actual: Any) -> str | None:
        try:
            return differs(expected, actual)
        except Exception as err:
            oom = isinstance(err, (torch.OutOfMemoryError, MemoryError))
            if not oom and isinstance(err, RuntimeError) and "CUDA" in str(err):
                raise
            traceback.print_exc()
            raise HarnessError(
                f"the harness's comparison of the outputs failed: {describe_error(err)}"
            ) from err

    return compared


def solution_call(
    solution: Any,
    inputs: list[Any],
    device: torch.device,
    label: str,
    sizes: list[int],
    seed: int = 0,
) -> anticheat.Call:
    """The solution on its own copy of `inputs`, with freed memory poisoned first and torch's
    generators seeded with `seed`."""
    with part("solution"):
        own = replicate_all(inputs, device)
        anticheat.poison(device, sizes)
        seed_everything(seed)
        return guard(
            verdicts.RUNTIME_ERROR, label, anticheat.watched_call, solution, own, device, label
        )


def check_refused(solution: Any, inputs: list[Any], device: torch.device, label: str) -> str | None:
    """None when the solution refuses invalid inputs: it raises, or returns a NaN somewhere.

    The reference is not run (PyTorch's CUDA kernels meet invalid input with a device-side
    assert, which ends the process's use of the GPU). A refusal that breaks the device, such as
    the solution's own device-side assert, is a runtime error: the solution must check, or
    return NaN, and leave the GPU usable.
    """
    try:
        with torch.no_grad():
            output = call(solution, inputs, device)
    except Exception as err:  # expected: one line in the log, not a traceback each trial
        print(f"{label}: refused, as it should: {describe_error(err)}", flush=True)
        output = None
    guard(
        verdicts.RUNTIME_ERROR,
        f"{label}: the device is unusable after invalid input",
        probe,
        device,
    )
    if output is None or _has_nan(output):
        return None
    return "returned finite values for invalid input; it should raise an error or return NaN"


def probe(device: torch.device) -> None:
    """A trivial computation on `device`; raises when an earlier fault broke the context."""
    value = torch.ones(1, device=device) + 1
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    if value.item() != 2:
        raise RuntimeError(f"1 + 1 gave {value.item()} on {device}")


def _has_nan(output: Any) -> bool:
    if isinstance(output, torch.Tensor):
        return output.is_floating_point() and bool(torch.isnan(output.detach()).any())
    if isinstance(output, (tuple, list)):
        return any(_has_nan(item) for item in output)
    return isinstance(output, float) and output != output


def call(model: Any, inputs: list[Any], device: torch.device) -> Any:
    """Run the model on private copies of the inputs and wait for the device to finish."""
    output = model(*replicate_all(inputs, device))
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # an asynchronous CUDA error surfaces here, in the call
    return output


def guard(failure: str, label: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Call `fn(*args)`; an exception becomes Verdict(failure, 'label: Error: message'), its
    traceback logged (it was not expected); a Verdict passes through as it is, unlogged."""
    try:
        return fn(*args)
    except Verdict:
        raise
    except Exception as err:
        traceback.print_exc()
        raise Verdict(failure, f"{label}: {describe_error(err)}") from err


def describe_error(err: BaseException) -> str:
    lines = [line for line in str(err).strip().splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[0] if lines else '(no message)'}"


def _uses_running_stats(module: nn.Module) -> bool:
    """A norm whose eval() output uses running statistics, and training output the batch's."""
    return isinstance(module, (_BatchNorm, _InstanceNorm)) and bool(module.track_running_stats)


def _random(module: nn.Module) -> bool:
    """A module that draws random numbers in training mode."""
    if isinstance(module, _DropoutNd):
        return module.p > 0
    return isinstance(module, nn.RReLU)


def _named(model: Any, keep: Any) -> list[str]:
    if not isinstance(model, nn.Module):
        return []
    return [
        f"{type(module).__name__} at {name!r}"
        for name, module in model.named_modules()
        if name and module.training and keep(module)
    ]


def random_modules(model: Any) -> list[str]:
    """'Dropout at 'drop'' for each module of `model` that draws random numbers as it runs now
    (Dropout with p > 0, RReLU, in training mode)."""
    return _named(model, _random)


def mode_dependent(model: Any) -> list[str]:
    """Each module of `model` whose output would differ in eval(): norms that would use their
    running statistics, and random modules."""
    return _named(model, lambda m: _uses_running_stats(m) or _random(m))


def training_note(reference: Any) -> str:
    """Why a solution may differ from a reference in training mode, or '' when nothing in the
    reference depends on its mode."""
    named = mode_dependent(reference)
    if not named:
        return ""
    return (
        f"; the reference runs in training mode, as its constructor left it ({', '.join(named)}):"
        " norms use the batch's own statistics, not the running ones, and dropout is active; "
        "a problem meant for inference calls self.eval() in Model.__init__"
    )
