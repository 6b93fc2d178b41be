"""run.py --render and --forget: the recorded results of one machine's folder, re-rendered or
trimmed, without a run.

Each acts on one folder under --results-dir, and names it before it writes: this machine's
(the folder a run with the same flags writes here: `results/cpu` without a GPU), or the one
--machine-folder names. A folder of another machine (the committed `results/nvidia-h200`) is
changed only where the user names it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness import record
from harness.errors import UserError
from harness.results import rendering
from harness.settings import typed


@dataclass(frozen=True)
class Chosen:
    """The machine folder a command acts on, and why that one (for the line that names it)."""

    folder: Path
    named: bool  # by --machine-folder; else this machine's own

    @property
    def shown(self) -> str:
        return str(typed(self.folder))

    @property
    def why(self) -> str:
        if self.named:
            return "named by --machine-folder"
        return "this machine's folder; --machine-folder NAME acts on another"


def render_folder(where: Chosen) -> None:
    """Re-render every table, chart and the summary of `where` from its run log."""
    folder = where.folder
    if not (folder / record.LOG_NAME).is_file():
        raise UserError(
            f"--render: no recorded runs in {where.shown} ({where.why}); {_others(folder)}"
        )
    print(f"rendering {where.shown} ({where.why})", flush=True)
    written = rendering.render_folder(folder)
    print(f"rendered {where.shown}: {_names(written)}")


def forget_solution(where: Chosen, problem_arg: str, solution: str) -> None:
    """Drop `solution`'s rows of the problem from the folder `where` names, and re-render it."""
    path = Path(problem_arg)  # named as discovery names it; the problem may be gone from disk
    problem = path.stem if path.suffix == ".py" else path.name
    folder = where.folder
    if not _recorded(folder, problem, solution):
        logged = record.read(folder) if (folder / record.LOG_NAME).is_file() else []
        shown = {r.solution for r in logged if r.problem == problem}
        elsewhere = [
            other.name
            for other in _folders(folder.parent)
            if other != folder and _recorded(other, problem, solution)
        ]
        hint = (
            f"it has rows in {', '.join(elsewhere)}: add --machine-folder {elsewhere[0]} to "
            "forget them there"
            if elsewhere
            else "check the names"
        )
        raise UserError(
            f"--forget {solution}: no rows of it for problem {problem!r} in {where.shown} "
            f"({where.why}; recorded there: {', '.join(sorted(shown)) or 'none'}); {hint}"
        )
    print(f"forgetting {solution} of {problem} in {where.shown} ({where.why})", flush=True)
    try:
        record.forget(folder, problem, solution)
        before = _tables(folder, problem)
        written = [*rendering.render_problem(folder, problem), rendering.render_summary(folder)]
    except OSError as err:
        raise UserError(
            f"--forget: cannot write {where.shown} ({err.strerror or err}); fix its permissions"
        ) from err
    removed = [path for path in before if not path.exists()]
    done = f"rewrote: {_names(written)}" + (f"; removed: {_names(removed)}" if removed else "")
    print(f"forgot {solution} of {problem} in {where.shown}; {done}")


def _recorded(folder: Path, problem: str, solution: str) -> bool:
    """Whether `folder`'s tables show rows of `solution` for `problem` (without writing)."""
    if not (folder / record.LOG_NAME).is_file():
        return False
    return bool(record.matching(record.read(folder), problem, solution))


def _folders(results_dir: Path) -> list[Path]:
    return sorted(p.parent for p in results_dir.glob(f"*/{record.LOG_NAME}"))


def _others(folder: Path) -> str:
    """What else is recorded beside `folder`, and how to name it."""
    names = [other.name for other in _folders(folder.parent) if other != folder]
    if not names:
        return f"nothing is recorded under {typed(folder.parent)} yet"
    return f"recorded under {typed(folder.parent)}: {', '.join(names)}; pass --machine-folder NAME"


def _tables(folder: Path, problem: str) -> list[Path]:
    """The problem's table, CSV and chart as they are in `folder` now."""
    return [p for p in (folder / f"{problem}{s}" for s in (".md", ".csv", ".svg")) if p.exists()]


def _names(paths: list[Path]) -> str:
    return ", ".join(p.name for p in paths)
