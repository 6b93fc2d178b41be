"""A static scan of a solution's source for patterns that honest kernels rarely need.

Only a warning layer: each hit is a note in the record and the table, never a verdict, because
each pattern has honest uses too. The checks that decide are dynamic (harness.anticheat,
harness.integrity, harness.profiling, harness.feeding). The Python code is read as a syntax
tree, so CUDA or C++ source held in its strings does not count, except for the raw-text patterns
at the end, which look for CUDA calls inside those strings.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

SUSPECT_MODULES = {
    "threading": "starts threads",
    "concurrent": "starts threads or processes",
    "multiprocessing": "starts processes",
    "subprocess": "starts processes (an install at run time?)",
    "ctypes": "uses ctypes",
    "gc": "walks the garbage collector's objects",
    "inspect": "inspects its callers",
    "harness": "imports the harness",
}
SUSPECT_CALLS = {
    "data_ptr": "reads a data pointer in Python (a cache key?)",
    "Stream": "creates a CUDA stream of its own",
    "set_stream": "switches the current CUDA stream",
    "as_subclass": "makes a tensor subclass",
    "_make_subclass": "makes a tensor subclass",
    "_exit": "exits the process",
    "exit": "exits the process",
    "kill": "signals a process",
    "_getframe": "inspects its callers",
}
SUSPECT_METHODS = {"__torch_function__", "__torch_dispatch__"}
# Calls whose argument at this place names what they reach: a computed name hides it from here.
NAMING_CALLS = {"getattr": 1, "setattr": 1, "delattr": 1, "__import__": 0, "import_module": 0}
COMPUTED_NAME = "builds names at run time (getattr, setattr or __import__ on a computed string)"
TOKEN_PASTING = re.compile(r"\w\s*##\s*\w")  # a##b in C or CUDA code held in a string
PASTED = "pastes tokens in its C/CUDA code (##), which can hide names from this scan"
REPLACED_ROOTS = ("torch", "time", "harness", "sys", "os")
RAW_PATTERNS = ((r"\bcudaStreamCreate\w*", "creates a CUDA stream in its CUDA code"),)


def scan(path: Path) -> list[str]:
    """One warning per kind of pattern found in the solution file, with its first line."""
    try:
        text = path.read_text(errors="replace")
        tree = ast.parse(text)
    except (OSError, SyntaxError, ValueError):
        return []
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        for meaning in _meanings(node):
            found.setdefault(meaning, getattr(node, "lineno", 0))
    for pattern, meaning in RAW_PATTERNS:
        match = re.search(pattern, text)
        if match:
            found.setdefault(meaning, text.count("\n", 0, match.start()) + 1)
    return [f"source: {meaning} (line {line})" for meaning, line in found.items()]


def _meanings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [m for a in node.names if (m := _module_meaning(a.name))]
    if isinstance(node, ast.ImportFrom) and node.module:
        meaning = _module_meaning(node.module)
        return [meaning] if meaning else []
    if isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)):
        return _call_meanings(node, node.func)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [PASTED] if TOKEN_PASTING.search(node.value) else []
    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [
            f"replaces {dotted}"
            for target in targets
            if isinstance(target, ast.Attribute)
            and (dotted := _dotted(target)).split(".")[0] in REPLACED_ROOTS
        ]
    if isinstance(node, ast.FunctionDef) and node.name in SUSPECT_METHODS:
        return ["defines a tensor subclass"]
    if isinstance(node, ast.Attribute) and _dotted(node) == "sys.modules":
        return ["reaches into loaded modules (sys.modules)"]
    if isinstance(node, ast.Attribute) and _dotted(node) == "sys.path":
        return ["reaches into the import path (sys.path)"]
    return []


def _call_meanings(node: ast.Call, func: ast.Attribute | ast.Name) -> list[str]:
    name = func.attr if isinstance(func, ast.Attribute) else func.id
    found = [SUSPECT_CALLS[name]] if name in SUSPECT_CALLS else []
    at = NAMING_CALLS.get(name)
    if at is not None and len(node.args) > at:
        named = node.args[at]
        if not (isinstance(named, ast.Constant) and isinstance(named.value, str)):
            found.append(COMPUTED_NAME)
    return found


def _module_meaning(module: str) -> str | None:
    return SUSPECT_MODULES.get(module.split(".")[0])


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Name):
        return node.id
    return "?"
