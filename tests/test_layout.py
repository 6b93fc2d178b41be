"""The tree shows the plan: which wing a module belongs to decides what it may import, and every
module and function stays small enough to read in one sitting."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
HARNESS = REPO / "harness"
WINGS = ("run", "measure", "results")
# What each part may import from the harness: the shared modules at the top import no wing; the
# worker's wing and the results' wing import only the shared modules and their own; the parent
# process's wing (run) drives the other two.
ALLOWED = {
    "shared": {"shared"},
    "measure": {"shared", "measure"},
    "results": {"shared", "results"},
    "run": {"shared", "measure", "results", "run"},
}
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def part(module: str) -> str:
    """'run', 'measure' or 'results' for a module of a wing, else 'shared'."""
    pieces = module.split(".")
    return pieces[1] if len(pieces) > 1 and pieces[1] in WINGS else "shared"


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def harness_imports(path: Path) -> list[str]:
    """Every harness module `path` imports, at any depth of its code."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.startswith("harness")]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("harness"):
            base = node.module or ""
            # `from harness.run import session` imports harness.run.session
            found += [
                f"{base}.{alias.name}" if base.count(".") < 2 else base for alias in node.names
            ]
    return found


MODULES = sorted(HARNESS.rglob("*.py"))


def test_every_module_lies_in_a_wing_or_among_the_shared_ones() -> None:
    folders = {p.parent.name for p in MODULES if p.parent != HARNESS}
    assert folders == set(WINGS)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(REPO)))
def test_imports_follow_the_direction_of_the_wings(path: Path) -> None:
    importer = part(module_name(path))
    wrong = [m for m in harness_imports(path) if part(m) not in ALLOWED[importer]]
    assert not wrong, f"{importer} module {module_name(path)} imports {wrong}"


def test_the_direction_test_sees_a_wrong_import(tmp_path: Path) -> None:
    fake = tmp_path / "harness" / "results" / "bad.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("from harness.measure import timing\nimport harness.run.session\n")
    imported = harness_imports(fake)
    assert imported == ["harness.measure.timing", "harness.run.session"]
    assert [part(m) for m in imported] == ["measure", "run"]
    assert not {"measure", "run"} & ALLOWED["results"]


@pytest.mark.parametrize(
    "path", [*MODULES, REPO / "run.py"], ids=lambda p: str(p.relative_to(REPO))
)
def test_modules_and_functions_are_short(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_MODULE_LINES
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(text))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


UNTYPED = re.compile(r"(dict|Mapping)\[str, Any\]")  # a record with no type of its own


def untyped_boundaries(text: str) -> list[str]:
    """The public functions and methods of a module's source whose parameters or result are
    a `dict[str, Any]` (or Mapping): what another module would pass or get untyped."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if node.name.startswith("_"):
            continue
        annotations = [arg.annotation for arg in ast.walk(node.args) if isinstance(arg, ast.arg)]
        for annotation in [*annotations, node.returns]:
            if annotation is not None and UNTYPED.search(ast.unparse(annotation)):
                found.append(node.name)
                break
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_untyped_dict_crosses_a_module_boundary(path: Path) -> None:
    assert not untyped_boundaries(path.read_text(encoding="utf-8"))


def test_the_boundary_test_sees_an_untyped_dict() -> None:
    text = "def f(a: dict[str, Any]) -> None: ...\ndef _g() -> Mapping[str, Any]: ...\n"
    text += "def h(b: int) -> Mapping[str, Any]: ...\n"
    assert untyped_boundaries(text) == ["f", "h"]


def _module_graph() -> dict[str, set[str]]:
    """Each harness module and the harness modules it imports (at any depth of its code)."""
    modules = {module_name(p): p for p in MODULES}
    graph = {}
    for name, path in modules.items():
        found = set()
        for imported in harness_imports(path):
            while imported and imported not in modules:  # `from m import name` names m.name
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                found.add(imported)
        graph[name] = found
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import one another, directly or around a loop."""
    reached = {name: {name} | graph[name] for name in graph}
    changed = True
    while changed:
        changed = False
        for seen in reached.values():
            more = set().union(*(graph.get(m, set()) for m in seen)) - seen
            if more:
                seen |= more
                changed = True
    groups = {
        frozenset(m for m in graph if name in reached[m] and m in reached[name]) for name in graph
    }
    return sorted(sorted(group) for group in groups if len(group) > 1)


def test_no_modules_import_each_other() -> None:
    assert cycles(_module_graph()) == []


def test_the_cycle_test_sees_a_loop() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_package_map_lists_every_module() -> None:
    import harness

    listed = set(re.findall(r"^ {4}(\w+)\s", harness.__doc__ or "", re.MULTILINE))
    assert {p.stem for p in MODULES if p.stem != "__init__"} == listed


def test_the_job_contract_imports_no_torch() -> None:
    # run/ reads what it asks of a worker and what comes back without loading a GPU library
    probe = "import sys, harness.job, harness.tolerance; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stdout + done.stderr


def test_the_parent_takes_the_job_contract_from_it_not_from_the_worker() -> None:
    for path in (HARNESS / "run").glob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "from harness.measure.worker import Job" not in text, path.name
        assert not re.search(r"from harness\.measure\.worker import [^\n]*\bJob\b", text), path.name


def test_the_parent_wraps_a_job_s_result_and_never_writes_into_it() -> None:
    # Where the worker ended and where it ran are the parent's: they are fields of Ended,
    # around the Judged, and a run's record takes every field of the result it shares with it.
    from dataclasses import fields

    from harness.job import Ended, Judged
    from harness.record import RunRecord
    from harness.run.session import CARRIED

    parents = {"phase", "case", "phase_s", "machine"}
    assert parents <= {f.name for f in fields(Ended)}
    assert not parents & {f.name for f in fields(Judged)}
    # the session adds baselines, scans and witnesses; a record's ceiling is the run's (a
    # "ceiling" job's result is where the session got it)
    decided = {"benchmarks", "warnings", "ceiling"}
    shared = {f.name for f in fields(Judged)} & {f.name for f in fields(RunRecord)}
    assert set(CARRIED) == shared - decided
