"""harness/verdicts.py is the one list of rejection rules and row flags: the code raises no rule
that is not in it, every rule in it is raised where it says, and the docs' tables are its own."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from harness import sandbox, verdicts
from harness.measure import anticheat
from harness.run import staging
from harness.verdicts import Verdict
from tests.conftest import REPO

HARNESS = REPO / "harness"


def raised_rules(path: Path) -> set[str]:
    """The rule names `path` passes, as a literal first argument, to a call of `reject`."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and node.args:
            name = getattr(node.func, "attr", getattr(node.func, "id", None))
            first = node.args[0]
            if name == "reject" and isinstance(first, ast.Constant):
                found.add(first.value)
    return found


def test_every_rule_raised_is_declared_and_raised_where_declared() -> None:
    by_module = {
        str(path.relative_to(HARNESS)): raised_rules(path) for path in HARNESS.rglob("*.py")
    }
    by_module["run/staging.py"] = {staging.REASON, f"sandbox_{staging.MEMORY_RULE}"}
    by_module["sandbox.py"] = {f"sandbox_{rule}" for rule in sandbox.RULES}
    raised = set().union(*by_module.values())
    assert raised == set(verdicts.REJECTIONS)
    for name, rule in verdicts.REJECTIONS.items():
        places = rule.decided_in.split(", ")
        assert any(name in by_module[place] for place in places), (name, places)


def test_every_flag_is_decided_in_a_module_that_exists() -> None:
    for rule in verdicts.FLAGS.values():
        for place in rule.decided_in.split(", "):
            assert (HARNESS / place).is_file(), place


def test_a_rule_not_in_the_registry_is_refused() -> None:
    assert isinstance(anticheat.reject("late_work", "x"), Verdict)
    with pytest.raises(ValueError, match="not a rule"):
        anticheat.reject("made_up_rule", "x")


@pytest.mark.parametrize(
    ("page", "registry", "what"),
    [("anticheat.md", verdicts.REJECTIONS, "rule"), ("results.md", verdicts.FLAGS, "flag")],
)
def test_the_docs_tables_are_the_registrys(page: str, registry: dict, what: str) -> None:
    table = verdicts.markdown_table(registry, what)
    assert table in (REPO / "docs" / page).read_text(), f"docs/{page} should hold:\n{table}"
