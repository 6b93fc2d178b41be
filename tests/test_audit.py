"""The problem audit: each broken fixture gets its finding, clean problems pass, cheats agree."""

from __future__ import annotations

import io
import re
from dataclasses import replace
from typing import Any

import pytest
import torch
import torch.nn as nn

from harness import verdicts
from harness.job import Ended, Job, Judged
from harness.loading import Case, Problem, load_problem, seed_everything
from harness.matching import mismatch
from harness.measure.audit import (
    REJECT,
    STRICT_REFUSES,
    WARN,
    WEAK,
    Audited,
    audit_each,
    audit_problem,
    constant,
    expanded,
    refused,
    render_findings,
    zeros,
)
from harness.measure.checking import Verdict, check_cases
from harness.record import Finding
from harness.run import isolate
from harness.run.auditing import Auditing
from harness.run.discovery import ProblemSource, list_problems
from harness.run.progress import Progress
from harness.run.session import Session
from harness.settings import Checking, Places, Settings
from harness.verdicts import UserError
from tests.conftest import FIXTURES, REPO

AUDIT = FIXTURES / "audit"
CPU = torch.device("cpu")
ONE_SHAPE = (WARN, "one_shape")


def fixture(name: str) -> Problem:
    return load_problem(name, AUDIT / f"{name}.py")


def checks(findings: list[Finding]) -> list[tuple[str, str]]:
    return [(finding.level, finding.check) for finding in findings]


@pytest.mark.parametrize(
    ("name", "expected", "phrase"),
    [
        ("good_relu", [ONE_SHAPE], "add CASES whose inputs have other sizes"),
        ("good_with_cases", [], None),
        ("scalar_loss", [ONE_SHAPE], "input shapes (16, 32) and (16, 32)"),
        (
            "returns_zeros",
            [(WEAK, "zero_passes"), ONE_SHAPE],
            "every value is within the tolerance of zero on seeds 1, 2, 3 (max |value| 0, 0x",
        ),
        ("tiny_output", [(WEAK, "zero_passes"), ONE_SHAPE], "or a tighter ATOL"),
        ("constant_output", [(WEAK, "constant"), ONE_SHAPE], "the output is the constant 1 "),
        (
            "fixed_inputs",
            [(WEAK, "seed_independent"), ONE_SHAPE],
            "the inputs are the same on seeds 1, 2, 3: they ignore the seed",
        ),
        (
            "insensitive_output",
            [(WEAK, "insensitive"), ONE_SHAPE],
            "the inputs change with the seed but the output barely does",
        ),
        (
            "raising_inputs",
            [(REJECT, "error")],
            "get_inputs() raised RuntimeError: Trying to create tensor with negative dimension",
        ),
        ("unseeded_reference", [(WEAK, "nondeterministic"), ONE_SHAPE], "on the same inputs"),
        ("random_reference", [(WEAK, "random"), ONE_SHAPE], "changes with torch's random seed"),
    ],
)
def test_each_fixture_gets_exactly_its_findings(
    name: str, expected: list[tuple[str, str]], phrase: str | None
) -> None:
    findings = audit_problem(fixture(name), CPU)
    assert checks(findings) == expected
    assert refused(findings) == any(level == REJECT for level, _ in expected)
    strict = any(level == REJECT or check in STRICT_REFUSES for level, check in expected)
    assert refused(findings, strict=True) == strict
    assert all("\n" not in finding.message for finding in findings)
    if phrase is not None:
        assert phrase in findings[0].message


def test_zero_passes_names_the_largest_value_and_the_tolerance() -> None:
    problem = replace(fixture("tiny_output"), atol=2e-5)
    (finding, _) = audit_problem(problem, CPU)
    assert finding.case == "default"
    match = re.search(
        r"max \|value\| ([0-9.e+-]+), ([0-9.e+-]+)x what the tolerance atol=2e-05 rtol=0.0001 "
        r"allows\)",
        finding.message,
    )
    assert match and 1e-9 < float(match.group(1)) < 1e-8  # randn * 1e-9 over 512 values
    assert float(match.group(2)) == pytest.approx(float(match.group(1)) / 2e-5, rel=0.05)
    # A tolerance under the values makes the outputs meaningful again.
    assert checks(audit_problem(replace(problem, atol=1e-12, rtol=0.0), CPU)) == [ONE_SHAPE]


class Cheat(nn.Module):
    """A solution that ignores its constructor arguments, as a cheat may."""

    def __init__(self, *init_inputs: Any) -> None:
        super().__init__()


class ZeroSolution(Cheat):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(x)


class OnesSolution(Cheat):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ones_like(x)


def memorised(problem: Problem) -> type:
    """A solution returning the default case's output, computed once, whatever its input."""
    seed_everything(0)
    with torch.no_grad():
        output = problem.model()(*problem.cases[0].get_inputs())

    class Memorised(Cheat):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return output.clone()

    return Memorised


@pytest.mark.parametrize(
    ("name", "cheat"),
    [
        ("returns_zeros", ZeroSolution),
        ("tiny_output", ZeroSolution),
        ("constant_output", OnesSolution),
        ("fixed_inputs", None),  # the memorised output of fixed_inputs itself
    ],
)
def test_a_rejected_problem_lets_the_cheat_pass_the_harness_check(
    name: str, cheat: type | None
) -> None:
    """The findings are meaningful: the cheat each one names passes harness.measure.checking's check
    on the rejected problem, and fails it on the clean ReLU problem."""
    problem = fixture(name)
    solution = cheat or memorised(problem)
    assert check_cases(problem, solution, CPU, Checking(trials=3, seed=7)) == 3
    clean = fixture("good_relu")
    with pytest.raises(Verdict) as failure:
        check_cases(clean, cheat or memorised(clean), CPU, Checking(trials=3, seed=7))
    assert failure.value.status == verdicts.INCORRECT


def test_a_times_zero_output_lets_a_zero_solution_match() -> None:
    problem = fixture("returns_zeros")
    seed_everything(1)
    with torch.no_grad():
        expected = problem.model()(*problem.cases[0].get_inputs())
    assert mismatch(expected, torch.zeros_like(expected)) is None
    relu = fixture("good_relu").model()(torch.randn(16, 32))
    assert mismatch(relu, torch.zeros_like(relu)) is not None


class ZerosInAStructure(nn.Module):
    def forward(self, x: torch.Tensor) -> Any:
        return (x * 0, [x * 0, 0.0])


class PartlyZero(nn.Module):
    def forward(self, x: torch.Tensor) -> Any:
        return (x * 0, x)


class AllTrue(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x > -1000


class Sevens(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.full_like(x, 7, dtype=torch.int64)


class Argmax(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.argmax(dim=1)


class PythonSum(nn.Module):
    def forward(self, x: torch.Tensor) -> float:
        return x.sum().item()


class PythonConstant(nn.Module):
    def forward(self, x: torch.Tensor) -> float:
        return 2.5


class DictOutput(nn.Module):
    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"y": x * 0}


@pytest.mark.parametrize(
    ("model", "check", "phrase"),
    [
        (ZerosInAStructure, "zero_passes", "max |value| 0,"),
        (PartlyZero, None, None),
        (AllTrue, "constant", "the output is the constant True "),
        (
            Sevens,
            "constant",
            "the output is the constant 7 on seeds 1, 2, 3 (it strays from it by at most 0x "
            "what exact equality allows)",
        ),
        (Argmax, None, None),
        (PythonSum, None, None),  # one number, but it changes with the seed
        (PythonConstant, "constant", "the output is the constant 2.5 "),
        (DictOutput, None, None),  # not a tensor, number or sequence: skipped
    ],
)
def test_outputs_of_every_kind(model: type, check: str | None, phrase: str | None) -> None:
    findings = audit_problem(replace(fixture("good_relu"), model=model), CPU)
    assert checks(findings) == ([(WEAK, check)] if check else []) + [ONE_SHAPE]
    if phrase is not None:
        assert phrase in findings[0].message


def raise_value_error() -> list[Any]:
    raise ValueError("no inputs today\nsecond line of the message")


class BrokenForward(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ x  # 16x32 @ 16x32: the shapes do not multiply


@pytest.mark.parametrize(
    ("case", "model", "message"),
    [
        (
            Case("bad inputs", lambda: [], raise_value_error),
            None,
            "get_inputs() raised ValueError: no inputs today",
        ),
        (
            Case("bad init", raise_value_error, lambda: [torch.randn(3)]),
            None,
            "get_init_inputs() raised ValueError: no inputs today",
        ),
        (
            Case("too many args", lambda: [1, 2], lambda: [torch.randn(3)]),
            None,
            "Model(*init_inputs) raised TypeError: ",
        ),
        (None, BrokenForward, "the reference Model raised RuntimeError: "),
    ],
)
def test_an_error_is_a_one_line_reject_naming_the_step_and_the_case(
    case: Case | None, model: type | None, message: str
) -> None:
    problem = fixture("good_relu")
    problem = replace(problem, cases=(*problem.cases, *([case] if case else [])))
    problem = replace(problem, model=model or problem.model)
    findings = audit_problem(problem, CPU)
    errors = [finding for finding in findings if finding.check == "error"]
    assert len(errors) == 1 and errors[0].level == REJECT
    assert errors[0].case == (case.name if case else "default")
    assert errors[0].message.startswith(message) and "\n" not in errors[0].message
    assert "second line" not in errors[0].message and refused(findings)


def test_invalid_cases_are_not_run_and_give_no_other_shape() -> None:
    problem = fixture("good_relu")
    refused = Case("out of range", lambda: [], raise_value_error, invalid=True)
    smaller = Case("7x3", lambda: [], lambda: [torch.randn(7, 3)], invalid=True)
    assert checks(audit_problem(replace(problem, cases=(*problem.cases, refused)), CPU)) == [
        ONE_SHAPE
    ]
    assert checks(audit_problem(replace(problem, cases=(*problem.cases, smaller)), CPU)) == [
        ONE_SHAPE
    ]
    valid = replace(smaller, invalid=False)
    assert audit_problem(replace(problem, cases=(*problem.cases, valid)), CPU) == []


def test_a_case_with_only_other_init_inputs_is_still_one_shape() -> None:
    problem = fixture("tiny_output")
    rescaled = Case("scale 2", lambda: [2.0], problem.cases[0].get_inputs)
    findings = audit_problem(replace(problem, cases=(*problem.cases, rescaled)), CPU)
    assert checks(findings) == [(WEAK, "zero_passes"), ONE_SHAPE]


def test_the_audit_needs_two_different_seeds() -> None:
    with pytest.raises(ValueError, match="two different seeds"):
        audit_problem(fixture("good_relu"), CPU, seeds=(4, 4))


def test_render_findings() -> None:
    assert render_findings("good_with_cases", []) == "good_with_cases: ok"
    findings = [
        Finding(WARN, "one_shape", None, "one shape only"),
        Finding(WEAK, "zero_passes", "default", "zeros pass"),
        Finding(REJECT, "error", "default", "it raised"),
    ]
    assert render_findings("p", findings).splitlines() == [
        "p: reject error (case 'default'): it raised",
        "p: weak zero_passes (case 'default'): zeros pass",
        "p: warn one_shape: one shape only",
    ]
    assert refused(findings) and not refused(findings[:2])
    assert refused(findings[:2], strict=True) and not refused(findings[:1], strict=True)


@pytest.mark.parametrize("name", list_problems(REPO / "problems"))
def test_the_shipped_problems_pass(name: str) -> None:
    """Every problem under problems/, so a problem added there must pass its audit in CI."""
    problem = load_problem(name, REPO / "problems" / name / "reference.py")
    findings = audit_problem(problem, CPU)
    assert all(f.level == WARN for f in findings), render_findings(name, findings)


KERNELBENCH_STYLE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2


def get_inputs():
    return [torch.randn(8, 16)]


def get_init_inputs():
    return []
"""


def test_problems_without_cases_get_one_note_a_run_and_others_their_warning(tmp_path) -> None:
    places = Places(tmp_path / "results", tmp_path / "builds", tmp_path / "logs")
    stream = io.StringIO()
    session = Session(Settings(device="cpu", places=places), Progress(stream), recording=False)
    for name in ("1_Relu", "2_Relu"):  # two stock KernelBench-style files: one note in all
        path = tmp_path / f"{name}.py"
        path.write_text(KERNELBENCH_STYLE)
        session.auditing.check(ProblemSource(name, path), load_problem(name, path), no_worker)
    relu = load_problem("1_Relu", tmp_path / "1_Relu.py")
    again = Case("same shapes", relu.cases[0].get_init_inputs, relu.cases[0].get_inputs)
    one_shape = replace(relu, cases=(*relu.cases, again))  # declares CASES, all one shape
    session.auditing.check(ProblemSource("one_shape", relu.path), one_shape, no_worker)
    lines = stream.getvalue().splitlines()
    assert sum("declares no CASES" in line for line in lines) == 1
    assert [line.split(":")[0] for line in lines if "audit warning" in line] == ["one_shape"]


def no_worker(job: Any) -> dict[str, Any]:
    raise AssertionError("on a CPU the audit runs in the run's own process")


def test_one_worker_audits_every_problem_and_finds_what_it_finds_here(tmp_path) -> None:
    """On a GPU the session audits in a worker (task "audit", so that run.py's process never
    touches the GPU), every problem of the run in one: the findings cross the pipe whole, and a
    problem that cannot be audited is that problem's error alone. Run here on the CPU."""
    settings = Settings(device="cpu", places=Places(tmp_path, tmp_path, tmp_path))
    names = ("returns_zeros", "good_relu", "missing")
    sources = tuple((name, str(AUDIT / f"{name}.py")) for name in names)
    job = Job(*sources[0], sources[0][1], str(tmp_path / "a.log"), "", settings, "audit", sources)
    result = isolate.run_isolated(job, lambda event: None).judged
    assert result.status == verdicts.OK, result.detail
    answers = result.audits or {}
    assert list(answers) == list(names)
    for name in names[:2]:
        found = list(answers[name].findings)
        assert found == audit_problem(load_problem(name, AUDIT / f"{name}.py"), torch.device("cpu"))
        assert (WEAK, "zero_passes") in checks(found) or name != "returns_zeros"
        assert all(f.level == WARN for f in found) or name == "returns_zeros"
    assert "missing.py" in (answers["missing"].error or "")


def test_the_run_asks_one_worker_for_all_audits_and_the_rest_alone(tmp_path) -> None:
    """What the session does with the answers on a GPU (Auditing, with the workers stood in
    for): one job for every problem; a problem it did not answer is audited alone; an error
    refuses that problem in one line."""
    settings = Settings(device="cuda:0", places=Places(tmp_path, tmp_path, tmp_path))
    sources = [ProblemSource(n, AUDIT / f"{n}.py") for n in ("returns_zeros", "good_relu")]
    jobs: list[Any] = []

    def run_job(job: Any) -> Ended:  # answers the first problem only
        jobs.append(job)
        return Ended(Judged(verdicts.OK, audits=audit_each(job.sources[:1], torch.device("cpu"))))

    def alone(source: ProblemSource, task: str, run: Any) -> Judged:
        jobs.append(source.name)
        return Judged(
            verdicts.OK, audits={source.name: Audited(error="RuntimeError: it fell over")}
        )

    job = lambda source, task, label: Job(source.name, "", "", "", "", settings, task)  # noqa: E731
    auditing = Auditing(settings, Progress(io.StringIO()), job, alone)
    auditing.audit_all(sources, run_job)
    assert [j.sources for j in jobs] == [tuple((s.name, str(s.reference)) for s in sources)]
    zeros_problem = load_problem("returns_zeros", sources[0].reference)
    (weak,) = auditing.check(sources[0], zeros_problem, run_job)  # judged, and flagged
    assert (weak.level, weak.check) == (WEAK, "zero_passes")
    relu = load_problem("good_relu", sources[1].reference)
    with pytest.raises(UserError, match="good_relu: its audit failed: RuntimeError: it fell"):
        auditing.check(sources[1], relu, run_job)
    assert jobs[1:] == ["good_relu"]


def test_strict_audit_refuses_a_weak_problem_and_names_the_option(tmp_path) -> None:
    settings = Settings(device="cpu", places=Places(tmp_path, tmp_path, tmp_path))
    source = ProblemSource("returns_zeros", AUDIT / "returns_zeros.py")
    problem = load_problem(source.name, source.reference)
    lenient = Session(settings, Progress(io.StringIO()), recording=False)
    assert [f.check for f in lenient.auditing.check(source, problem, no_worker)] == ["zero_passes"]
    strict = Session(replace(settings, strict_audit=True), Progress(io.StringIO()), False)
    with pytest.raises(UserError, match=r"fails its audit \(zero_passes, --strict-audit\)"):
        strict.auditing.check(source, problem, no_worker)


def test_an_insensitive_output_is_told_apart_and_measured_against_the_tolerance() -> None:
    (finding, _) = audit_problem(fixture("insensitive_output"), CPU)
    assert finding.check == "insensitive" and "ignore the seed" not in finding.message
    match = re.search(r"moves by at most ([0-9.e+-]+)x what the tolerance", finding.message)
    # 1e-7 times the change of a randn input (a few units) against atol + rtol |ramp| ~ 1e-4
    assert match and 1e-4 < float(match.group(1)) < 1e-1
    (fixed, _) = audit_problem(fixture("fixed_inputs"), CPU)
    assert fixed.check == "seed_independent" and "ignore the seed" in fixed.message


def test_the_trivial_answers_the_audit_compares_with_hold_no_output_sized_memory() -> None:
    output = (torch.randn(1000, 1000), [torch.arange(10), 2.5])
    nothing = zeros(output)
    assert nothing[0].untyped_storage().nbytes() <= 8 and nothing[0].shape == (1000, 1000)
    assert nothing[1][1] == 0.0 and isinstance(nothing[1], list)
    filled = expanded(constant(output), output)
    assert filled[0].untyped_storage().nbytes() <= 8
    assert filled[1][0].shape == (10,) and filled[1][1] == 2.5


def test_problems_are_audited_in_batches_as_their_solutions_come_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A sweep's first judgement waits for its problem's batch, not for every problem's audit.
    from pathlib import Path

    from harness.run import auditing
    from harness.run.discovery import ProblemSource

    monkeypatch.setattr(auditing, "AUDIT_BATCH", 2)
    batches: list[list[str]] = []
    fake = type("Fake", (), {"audit_all": lambda self, b, run: batches.append([s.name for s in b])})
    prepared: list[str] = []

    def prepare(source: ProblemSource, run: Any) -> tuple[Any, int]:
        prepared.append(source.name)
        if source.name == "p3":
            raise UserError("p3 is refused")
        return object(), 1

    preparing = auditing.Preparing(fake(), prepare)
    sources = {f"p{n}": ProblemSource(f"p{n}", Path(f"p{n}.py")) for n in range(1, 8)}
    preparing.order = list(sources.values())
    run = lambda job: None  # noqa: E731
    first = preparing.get(sources["p1"], run, lambda: [sources["p5"], sources["p1"]])
    assert batches == [["p1", "p5", "p2", "p3"]]  # its own, the ready ones, the next two
    assert isinstance(first, tuple) and prepared == ["p1"]  # the rest prepared when judged
    assert isinstance(preparing.get(sources["p3"], run, list), UserError)  # kept, not raised
    assert batches == [["p1", "p5", "p2", "p3"]]  # audited already: no worker
    preparing.get(sources["p1"], run, list)
    assert prepared == ["p1", "p3"]  # once each
    preparing.get(sources["p7"], run, lambda: [sources["p6"]])
    assert batches[1] == ["p7", "p6", "p4"]  # what is left, none twice
