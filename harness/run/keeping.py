"""run.py --render and --forget: the recorded results, re-rendered or trimmed, without a run."""

from __future__ import annotations

from pathlib import Path

from harness import record
from harness.errors import UserError
from harness.results import rendering


def render_everything(results_dir: Path) -> None:
    """Re-render every table, chart and summary from the run logs under `results_dir`."""
    folders = sorted(p.parent for p in results_dir.glob(f"*/{record.LOG_NAME}"))
    if not folders:
        raise UserError(f"no recorded runs under {results_dir} (no */{record.LOG_NAME})")
    for folder in folders:
        written = rendering.render_folder(folder)
        print(f"rendered {folder}: {', '.join(p.name for p in written)}")


def forget_solution(results_dir: Path, problem_arg: str, solution: str) -> None:
    """Drop `solution`'s rows of the problem from every results folder that shows them."""
    path = Path(problem_arg)  # named as discovery names it; the problem may be gone from disk
    problem = path.stem if path.suffix == ".py" else path.name
    folders = sorted(p.parent for p in results_dir.glob(f"*/{record.LOG_NAME}"))
    dropped = False
    for folder in folders:
        try:
            if not record.forget(folder, problem, solution):
                continue
            before = _tables(folder, problem)
            written = [*rendering.render_problem(folder, problem), rendering.render_summary(folder)]
        except OSError as err:
            raise UserError(
                f"--forget: cannot write {folder} ({err.strerror or err}); fix its permissions"
            ) from err
        dropped = True
        removed = [path for path in before if not path.exists()]
        done = f"rewrote: {_names(written)}" + (f"; removed: {_names(removed)}" if removed else "")
        print(f"forgot {solution} of {problem} in {folder}; {done}")
    if not dropped:
        shown = {r.solution for f in folders for r in record.read(f) if r.problem == problem}
        raise UserError(
            f"--forget {solution}: no rows of it for problem {problem!r} under {results_dir} "
            f"(recorded there: {', '.join(sorted(shown)) or 'none'}); check the names, or "
            "pass --results-dir"
        )


def _tables(folder: Path, problem: str) -> list[Path]:
    """The problem's table, CSV and chart as they are in `folder` now."""
    return [p for p in (folder / f"{problem}{s}" for s in (".md", ".csv", ".svg")) if p.exists()]


def _names(paths: list[Path]) -> str:
    return ", ".join(p.name for p in paths)
