"""Find problems and their solutions on disk.

A problem is one of:
  * a folder `problems/<name>/` holding `reference.py` (the project's own layout);
  * any KernelBench-format `.py` file, given by path;
  * a GPUCodeForces-style folder holding `example_torchcode.py` (the reference) and, usually,
    `example_cudacode.py` (a solution).

Solutions of problem `<name>` are the `.py` files in `solutions/<name>/` whose names do not
start with `_`, plus a GPUCodeForces folder's `example_cudacode.py`. Discovery is a directory
scan: adding a problem or a solution touches only its own folder.

A static scan of a solution's source for patterns that honest kernels rarely need.

Only a warning layer: each hit is a note in the record and the table, never a verdict, because
each pattern has honest uses too. The checks that decide are dynamic (harness.measure.anticheat,
harness.measure.profiling, harness.measure.feeding). The Python code is read as a syntax
tree, so CUDA or C++ source held in its strings does not count, except for the raw-text patterns
at the end, which look for CUDA calls inside those strings.
"""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path

from harness.verdicts import UserError

# KernelBench's own layout: runs/<run>/level_1_problem_19_sample_0_kernel.py solves
# KernelBench/level1/19_ReLU.py
KERNELBENCH_SAMPLE = re.compile(r"level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py")
KERNELBENCH_LEVEL = re.compile(r"level_?(\d+)")
REFERENCE_FILE = "reference.py"
GPUCODEFORCES_REFERENCE = "example_torchcode.py"
GPUCODEFORCES_SOLUTION = "example_cudacode.py"


@dataclass(frozen=True)
class ProblemSource:
    """Where a problem's reference and solutions live."""

    name: str
    reference: Path
    solutions: tuple[Path, ...] = field(default=())


def list_problems(problems_dir: Path) -> list[str]:
    """Names of the problem folders under `problems_dir` that hold a reference."""
    if not problems_dir.is_dir():
        return []
    return sorted(
        entry.name
        for entry in problems_dir.iterdir()
        if entry.is_dir() and (entry / REFERENCE_FILE).is_file()
    )


def natural_key(name: str) -> list[int | str]:
    """Sort key that orders numbers by value: KernelBench's 2_... before 19_... before 100_...."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def find_solutions(folder: Path) -> list[Path]:
    """The solution files in `folder`, sorted by name (helpers named `_*.py` are skipped)."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob("*.py") if not p.name.startswith("_"))


def resolve_problem(arg: str, problems_dir: Path, solutions_dir: Path) -> ProblemSource:
    """Turn `--problem NAME|PATH` into a ProblemSource, or raise UserError saying what exists."""
    path = Path(arg)
    if path.suffix == ".py" or path.is_dir():
        if not path.exists():
            raise UserError(f"problem path {arg!r} does not exist")
        return _problem_at_path(path.resolve(), solutions_dir)
    reference = problems_dir / arg / REFERENCE_FILE
    if reference.is_file():
        return ProblemSource(arg, reference.resolve(), _solutions_for(arg, solutions_dir))
    raise UserError(_unknown_problem_message(arg, list_problems(problems_dir)))


def _problem_at_path(path: Path, solutions_dir: Path) -> ProblemSource:
    if path.is_file():
        return ProblemSource(path.stem, path, _solutions_for(path.stem, solutions_dir))
    if (path / REFERENCE_FILE).is_file():
        return ProblemSource(
            path.name, path / REFERENCE_FILE, _solutions_for(path.name, solutions_dir)
        )
    if (path / GPUCODEFORCES_REFERENCE).is_file():
        bundled = path / GPUCODEFORCES_SOLUTION
        extra = (bundled,) if bundled.is_file() else ()
        solutions = extra + _solutions_for(path.name, solutions_dir)
        return ProblemSource(path.name, path / GPUCODEFORCES_REFERENCE, solutions)
    raise UserError(
        f"folder {str(path)!r} is not a problem: it holds neither {REFERENCE_FILE} nor "
        f"{GPUCODEFORCES_REFERENCE}"
    )


def _solutions_for(name: str, solutions_dir: Path) -> tuple[Path, ...]:
    return tuple(p.resolve() for p in find_solutions(solutions_dir / name))


def _unknown_problem_message(arg: str, available: list[str]) -> str:
    message = f"unknown problem {arg!r}"
    close = difflib.get_close_matches(arg, available, n=1)
    if close:
        message += f" (did you mean {close[0]!r}?)"
    listed = ", ".join(available) if available else "none"
    return (
        f"{message}; available: {listed}; or pass the path of a KernelBench .py file or a "
        "problem folder"
    )


def given_solutions(given: list[Path], source: ProblemSource) -> list[Path]:
    """The solutions named on the command line, each a file's path or the name of one of
    `source`'s solutions (`fast_cuda` for solutions/<problem>/fast_cuda.py), resolved; a
    UserError for a missing file, an unknown name, or a file that cannot be a solution
    (`missing_model_new`), before anything is built."""
    paths = [_solution_file(path, source) for path in given]
    for path in paths:
        reason = missing_model_new(path)
        if reason:
            raise UserError(f"--solution {path}: {reason}")
    return [path.resolve() for path in paths]


def _solution_file(path: Path, source: ProblemSource) -> Path:
    if path.is_file():
        return path
    if len(path.parts) == 1:  # a bare name: one of the problem's own solutions
        shipped = {p.stem: p for p in source.solutions}
        if path.stem in shipped:
            return shipped[path.stem]
        if path.suffix != ".py":
            names = ", ".join(shipped) or "none"
            raise UserError(
                f"--solution {path}: no such file, and problem {source.name!r} has no solution of "
                f"that name; its solutions: {names}"
            )
    raise UserError(f"--solution {path}: no such file")


def missing_model_new(path: Path) -> str | None:
    """Why `path` cannot be a solution (not a .py file, no top-level ModelNew, a syntax error),
    or None.

    A static look at the source: it costs no import and no build, so a typo is reported at
    once instead of after a multi-minute compile.
    """
    if path.suffix != ".py":  # Python imports only a .py file: say so, not what it lacks
        return f"{path.name} is not a Python file: a solution is a .py file defining ModelNew"
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError as err:
        return f"{path.name}: syntax error on line {err.lineno}: {err.msg}"
    except (OSError, UnicodeDecodeError) as err:
        return f"{path.name}: cannot read: {err}"
    names = _top_level_names(tree)
    if "ModelNew" in names:
        return None
    classes = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
    found = ", ".join(classes) if classes else "no classes"
    return f"{path.name} defines no ModelNew at top level (it defines: {found})"


BUILDER_WORDS = ("cpp_extension", "load_inline")  # how a file reaches torch's extension builder


def builds_at_import(path: Path) -> bool:
    """Whether importing the solution `path` may build an extension, by a static look: its
    source names torch's extension builder, or it imports a module that lies beside it (which
    might). A solution that needs no build gets no build job (one worker fewer); one that hides
    its builder from this look is built by its judge instead, under the same time limit."""
    try:
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source, filename=str(path))
    except (OSError, UnicodeDecodeError, SyntaxError):
        return True  # the build job reports it
    if any(word in source for word in BUILDER_WORDS):
        return True
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0] if not node.level else ".")
    beside = path.parent
    return "." in imported or any(
        (beside / f"{name}.py").exists() or (beside / name).is_dir() for name in imported if name
    )


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def sweep_sources(problems_dir: Path, solutions_dir: Path) -> list[ProblemSource]:
    """Every problem in `problems_dir` (KernelBench .py files, and problem folders as
    `--problem` takes them), each with its solutions from `solutions_dir`, matched by name in
    either layout: ours, `<solutions_dir>/<problem>/*.py`; or KernelBench's, files named
    `level_<L>_problem_<N>_sample_<S>_kernel.py` beside each other, for the problem file whose
    name starts with `<N>_` (and, where `problems_dir` is named `level<L>`, of that level)."""
    if not problems_dir.is_dir():
        raise UserError(f"--problems {problems_dir}: no such folder")
    if not solutions_dir.is_dir():
        raise UserError(f"--solutions {solutions_dir}: no such folder")
    entries = sorted(
        (
            p
            for p in problems_dir.iterdir()
            if not p.name.startswith(("_", "."))
            and (
                (p.is_file() and p.suffix == ".py")
                or (p / REFERENCE_FILE).is_file()
                or (p / GPUCODEFORCES_REFERENCE).is_file()
            )
        ),
        key=lambda p: natural_key(p.name),
    )
    level = KERNELBENCH_LEVEL.fullmatch(problems_dir.name)
    samples = _kernelbench_samples(solutions_dir, level.group(1) if level else None)
    sources = []
    for entry in entries:
        source = _problem_at_path(entry.resolve(), solutions_dir)
        number = re.match(r"(\d+)_", source.name)
        extra = samples.get(int(number.group(1)), ()) if number else ()
        sources.append(ProblemSource(source.name, source.reference, source.solutions + extra))
    if not sources:
        raise UserError(
            f"--problems {problems_dir}: no problems in it (KernelBench .py files, or folders "
            f"holding {REFERENCE_FILE})"
        )
    return sources


def _kernelbench_samples(folder: Path, level: str | None) -> dict[int, tuple[Path, ...]]:
    """KernelBench's sample files in `folder` by problem number, of `level` where given."""
    found: dict[int, list[Path]] = {}
    for path in sorted(folder.glob("level_*_problem_*_sample_*_kernel.py")):
        match = KERNELBENCH_SAMPLE.fullmatch(path.name)
        if match and (level is None or int(match.group(1)) == int(level)):
            found.setdefault(int(match.group(2)), []).append(path.resolve())
    return {number: tuple(paths) for number, paths in found.items()}


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
