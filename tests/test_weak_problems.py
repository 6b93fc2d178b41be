"""Every KernelBench problem judged as its users need: a weak problem (a wrong solution could
pass it) is judged and flagged, not refused; a solution sees its reference's globals, as under
KernelBench's one namespace; a sweep accounts for every problem and solution it was given."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import run
from harness import verdicts
from harness.loading import import_file, reference_namespace
from tests.conftest import FIXTURES

WEAK = FIXTURES / "weak"
SOLUTIONS = FIXTURES / "weak_solutions"
SIGMOID = (WEAK / "1_saturated_sigmoid.py", SOLUTIONS / "level_1_problem_1_sample_0_kernel.py")
TINY = (WEAK / "2_tiny_scale.py", SOLUTIONS / "level_1_problem_2_sample_0_kernel.py")
PROFILES = pytest.mark.parametrize("profile", [(), ("--as", "kernelbench")], ids=["default", "kb"])


@PROFILES
@pytest.mark.parametrize(
    ("pair", "check"), [(SIGMOID, "constant"), (TINY, "zero_passes")], ids=["constant", "zero"]
)
def test_a_weak_problem_is_judged_ok_and_its_weakness_named_on_record_and_row(
    cli: Any, capsys: Any, pair: tuple[Path, Path], check: str, profile: tuple[str, ...]
) -> None:
    problem, solution = pair
    code = cli(
        "--problem", str(problem), "--solution", str(solution), *profile, "--budget-ms", "50"
    )
    out = capsys.readouterr()
    assert code == run.EXIT_OK, out.err
    record = cli.record(solution.stem)
    assert record["status"] == verdicts.OK and record["benchmarks"]
    assert [w["check"] for w in record["weaknesses"]] == [check]
    assert f"weak problem ({check})" in out.err  # said on the console as the problem starts
    (table,) = (cli.root / "results").glob(f"*/{problem.stem}.md")
    page = table.read_text()
    assert "**Weak problem**" in page and f"weak problem: {check}" in page
    (summary,) = (cli.root / "results").glob("*/summary.md")
    assert re.search(rf"\| {problem.stem} +\| {check} +\|", summary.read_text())


def test_strict_audit_refuses_a_weak_problem_in_one_line_and_a_sweep_records_it(
    cli: Any, capsys: Any
) -> None:
    problem, solution = TINY
    code = cli("--problem", str(problem), "--solution", str(solution), "--strict-audit")
    assert code == run.EXIT_INPUT
    assert "fails its audit (zero_passes, --strict-audit)" in capsys.readouterr().err
    assert cli.records() == []  # one problem: refused, nothing recorded
    code = cli("--problems", str(WEAK), "--solutions", str(SOLUTIONS), "--strict-audit")
    assert code == run.EXIT_INPUT
    record = cli.record(solution.stem)
    assert record["status"] == verdicts.PROBLEM_ERROR
    assert record["detail"].startswith("not judged: problem '2_tiny_scale' fails its audit")


def test_a_sweep_accounts_for_every_problem_and_solution_it_was_given(
    cli: Any, capsys: Any
) -> None:
    code = cli("--problems", str(WEAK), "--solutions", str(SOLUTIONS), "--check-only")
    out = capsys.readouterr().out
    assert code == run.EXIT_INPUT  # a problem was refused
    assert "sweep: 3 solution(s) of 3 problem(s)" in out
    assert (
        "given 4 problem(s): 2 judged (2 weak, their rows flagged), 1 refused, 1 without a "
        "solution" in out
    )
    assert "weak: 1_saturated_sigmoid (constant), 2_tiny_scale (zero_passes)" in out
    assert "refused: 4_broken_reference: problem '4_broken_reference' fails its audit" in out
    assert "without a solution: 3_unsolved_relu" in out
    waited = re.search(
        r"first judgement at (\d+) s \(.* (\d+) s\): the judging slot idle (\d+) s", out
    )
    assert waited is not None, out
    judging, own, idle = (int(n) for n in waited.groups())
    assert own <= judging and abs(idle - (judging - own)) <= 1
    statuses = {r["problem"]: r["status"] for r in cli.records()}
    assert statuses == {
        "1_saturated_sigmoid": verdicts.OK,
        "2_tiny_scale": verdicts.OK,
        "4_broken_reference": verdicts.PROBLEM_ERROR,
    }
    (summary,) = (cli.root / "results").glob("*/summary.md")
    text = summary.read_text()
    assert "3 solution(s) of 3 problem(s): 2 judged (2 of them weak), 1 refused" in text
    assert "## Weak problems" in text and "## Refused, not judged" in text
    assert re.search(
        r"\| 4_broken_reference +\| problem '4_broken_reference' fails its audit", text
    )


def test_a_solution_sees_its_references_globals_and_the_reference_keeps_its_own(
    tmp_path: Path,
) -> None:
    reference = tmp_path / "reference.py"
    reference.write_text("import torch\nbatch_size = 16\nshared = []\n")
    solution = tmp_path / "solution.py"
    solution.write_text(
        "rows = batch_size * 2\nbatch_size = 1\nones = torch.ones(rows)\nname = __name__\n"
    )
    module = import_file(solution, reference_namespace(reference))
    assert module.rows == 32 and module.ones.shape == (32,) and module.batch_size == 1
    assert module.name.startswith("harness_loaded_solution")  # its own dunders, not the file's
    assert reference_namespace(reference)["batch_size"] == 16  # a fresh import each time
    assert "__file__" not in reference_namespace(reference)
    assert reference_namespace(tmp_path / "missing.py") == {}
    with pytest.raises(NameError, match="batch_size"):
        import_file(solution)  # without the namespace, as before
