"""No docstring, comment or doc names code that does not exist: every dotted name that starts
with harness, and every `module.name` whose module is one of the harness's (by its short name),
resolves; every path under harness/ or tests/ is a file; no module deleted from harness/ is named
any more. The harness's sources, run.py, scripts/, the tests, the README and docs/ are read."""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
HARNESS = REPO / "harness"
MODULE_FILES = sorted(HARNESS.rglob("*.py"))
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SOURCES = [*MODULE_FILES, REPO / "run.py", *sorted((REPO / "scripts").glob("*.py"))]
SOURCES += sorted((REPO / "tests").glob("*.py"))
DOTTED = re.compile(r"(?<![\w./-])((?:harness\.)?[a-z_][a-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_.]*)")
PATH = re.compile(r"(?<![\w./-])((?:harness|tests)/[\w/.-]+\.py)\b")
# Names that are both a harness module's short name and a word of prose or another library's
# module: `settings.device` is an attribute of a Settings object, `record.status` of a record.
OBJECTS = {"settings", "record", "stats", "sandbox", "machine", "progress", "report", "checking"}
OBJECTS |= {"evaluator", "run", "job"}  # variables named so; run.py is run too
FILE_SUFFIXES = {"py", "md", "csv", "svg", "json", "jsonl", "html", "txt", "log", "sqlite", "png"}


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(path): path for path in MODULE_FILES}


@cache
def short_names() -> dict[str, str]:
    """Each module's last name -> its full name, where only one module has that name."""
    found: dict[str, list[str]] = {}
    for name in modules():
        found.setdefault(name.rpartition(".")[2], []).append(name)
    return {short: names[0] for short, names in found.items() if len(names) == 1}


@cache
def top_level(module: str) -> frozenset[str]:
    """The names `module` defines or imports at its top level (and its submodules' names)."""
    tree = ast.parse(modules()[module].read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, (ast.If, ast.Try)):  # TYPE_CHECKING imports, fallbacks
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    names |= {(a.asname or a.name).split(".")[0] for a in inner.names}
    prefix = module + "."
    names |= {m[len(prefix) :].split(".")[0] for m in modules() if m.startswith(prefix)}
    return frozenset(names)


@cache
def deleted_modules() -> frozenset[str]:
    """The short names of modules once under harness/ and gone now (from git's history; empty
    where there is none, as in a shallow clone)."""
    listed = subprocess.run(
        ["git", "log", "--diff-filter=D", "--name-only", "--format=", "--", "harness"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    gone = {Path(line).stem for line in listed.stdout.split() if line.endswith(".py")}
    current = {name.rpartition(".")[2] for name in modules()}
    return frozenset(gone - current - OBJECTS - {"__init__"})


def problem(first: str, rest: str) -> str | None:
    """What is wrong with the reference `first.rest`, or None (also for what is not one)."""
    full = first if first.startswith("harness.") else None
    if rest.split(".")[0] in FILE_SUFFIXES:  # a file's name: summary.md, baselines.jsonl
        return None
    if full is None and first in deleted_modules():
        return f"module {first} no longer exists"
    if full is None and first in short_names() and first not in OBJECTS:
        full = short_names()[first]
    if full is None:
        return None
    pieces = rest.rstrip(".").split(".")
    if pieces[0] in FILE_SUFFIXES:  # a file's name: summary.md, baselines.jsonl
        return None
    while full not in modules():  # harness.run.session.Session: the module is the longest prefix
        if not pieces or full.count(".") > 3:
            return f"no module {full}"
        head, _, last = full.rpartition(".")
        if head not in modules():
            full, pieces = f"{full}.{pieces.pop(0)}", pieces
            if full in modules():
                break
            return f"no module {full}"
        full, pieces = head, [last, *pieces]
    if not pieces or pieces[0] in ("py", "*") or not pieces[0]:
        return None
    if pieces[0] not in top_level(full):
        return f"{full} has no {pieces[0]}"
    return None


def prose_of(path: Path) -> list[tuple[int, str]]:
    """The docstrings and comments of a Python file (each with its first line), or a doc's
    lines."""
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".py":
        return list(enumerate(text.splitlines(), start=1))
    kept = [
        (token.start[0], token.string)
        for token in tokenize.generate_tokens(io.StringIO(text).readline)
        if token.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body[0] if node.body else None
            constant = body.value if isinstance(body, ast.Expr) else None
            if isinstance(constant, ast.Constant) and isinstance(constant.value, str):
                kept.append((constant.lineno, constant.value))
    return kept


def stale(path: Path) -> list[str]:
    """Every reference in `path`'s prose to code that does not exist, as 'line: reference: why'."""
    wrong = []
    for line, text in prose_of(path):
        for match in DOTTED.finditer(text):
            why = problem(match.group(1), match.group(2))
            if why:
                wrong.append(f"{line}: {match.group(0)}: {why}")
        for match in PATH.finditer(text):
            if not (REPO / match.group(1)).is_file():
                wrong.append(f"{line}: {match.group(1)}: no such file")
    return wrong


@pytest.mark.parametrize("path", [*SOURCES, *DOCS], ids=lambda p: str(p.relative_to(REPO)))
def test_no_prose_names_code_that_does_not_exist(path: Path) -> None:
    assert not stale(path), "\n".join(stale(path))


def test_the_reference_check_sees_what_is_gone_and_passes_what_is_there() -> None:
    assert problem("harness.run.session", "Session") is None
    assert problem("harness.run.session", "Nothing") == "harness.run.session has no Nothing"
    assert problem("harness.run", "vanished") is not None
    assert problem("scheduler", "Scheduler") is None
    assert problem("scheduler", "missing_function") is not None
    assert problem("torch", "compile") is None  # not the harness's: not checked
    if "integrity" in deleted_modules():  # where git's history is there to say so
        assert problem("integrity", "check") == "module integrity no longer exists"
