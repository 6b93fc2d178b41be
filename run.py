"""Check and time JIT-compiled kernel solutions against PyTorch references.

    python run.py --problem multilabel_margin     every solution of one problem
    python run.py --all                           every problem under problems/
    python run.py --problem smooth_l1 --solution path/to/mine.py
    python run.py --list                          what there is to run
    python run.py --all --audit                   audit the problems' references only
    python run.py --problem smooth_l1 --forget mine   drop a solution's rows from the tables

Exit status: 0 when every solution that could run here ran and was correct (a CUDA solution
skipped for lack of a GPU is not a failure); 1 when any solution failed; 2 for bad flags;
3 for an unknown problem, an unusable file or a folder that cannot be written; 4 when the
harness itself failed (nothing is recorded against the solution it was running); 130 when
interrupted.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from harness import loading, record, settings, status, toolchain
from harness.errors import HarnessError, UserError
from harness.results import comparison, rendering, report
from harness.run.discovery import (
    ProblemSource,
    given_solutions,
    list_problems,
    resolve_problem,
)
from harness.run.session import Session, passed
from harness.settings import REPO

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INPUT, EXIT_HARNESS, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130
PROBLEMS_DIR = REPO / "problems"
SOLUTIONS_DIR = REPO / "solutions"


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows defaults where there is one, and keeps the epilog's status table as written."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False, argparse.SUPPRESS) or action.nargs == 0:
            return action.help
        return super()._get_help_string(action)


DESCRIPTION = """\
Build each solution in its own process, check it against the reference on every declared
case, time both with CUDA events (L2 flushed before each call) or, without a GPU, a wall
clock, and record the results under <results-dir>/<machine>/."""


SETTINGS_GROUPS = (  # (title, description, settings class, with the settings it holds)
    ("device, build and audit", None, settings.Settings, False),
    ("checking", "how a solution is judged", settings.Checking, True),
    ("timing", "the stopping rule (see 'timing rule' below) and the timer", settings.Timing, True),
    ("limits", "when a solution's worker is killed", settings.Limits, True),
    ("places", "where results, builds and logs go", settings.Places, True),
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="run.py", description=DESCRIPTION, epilog=_epilog(), formatter_class=HelpFormatter
    )
    _add_actions(parser)
    for title, description, cls, nested in SETTINGS_GROUPS:
        settings.add_flags(parser.add_argument_group(title, description), cls, nested)
    args = parser.parse_args(argv)
    if args.solution and not args.problem:
        parser.error("--solution needs --problem (which reference should it be checked against?)")
    if args.audit_only and not (args.problem or args.all):
        parser.error("--audit needs --problem or --all")
    if args.forget and (not args.problem or args.solution or args.audit_only):
        parser.error("--forget needs --problem, and takes no --solution or --audit")
    if not args.recording and (args.forget or args.audit_only or not (args.problem or args.all)):
        parser.error("--no-record is for a run (--problem or --all), not --forget or --audit")
    try:  # the values alone, before the device is resolved: bad flags fail before any work
        settings.from_flags(args)
    except ValueError as err:
        parser.error(str(err))
    return args


def _epilog() -> str:
    statuses = "\n".join(f"  {name:<14} {meaning}" for name, meaning in status.MEANING.items())
    return (
        f"timing rule:\n{_rule_text()}\n\nstatuses:\n{statuses}\n\nexit status: 0 every "
        "solution that could run here was correct; 1 some failed;\n  2 bad flags; 3 unknown "
        "problem, unusable file or unwritable folder;\n  4 the harness itself failed; "
        "130 interrupted"
    )


def _add_actions(parser: argparse.ArgumentParser) -> None:
    """What to do: run problems, list, render, compare or audit; and which solutions."""
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--problem",
        metavar="NAME|PATH",
        help="a problem under problems/, a KernelBench .py file, or a problem "
        "folder (reference.py, or GPUCodeForces' example_torchcode.py)",
    )
    what.add_argument("--all", action="store_true", help="every problem under problems/")
    what.add_argument("--list", action="store_true", help="list problems and solutions, then exit")
    what.add_argument(
        "--render",
        action="store_true",
        help="re-render every table, chart and summary under --results-dir from the recorded "
        "runs (no GPU needed), then exit",
    )
    what.add_argument(
        "--compare",
        nargs=2,
        metavar=("OLD", "NEW"),
        help="compare two recorded runs, each FOLDER[@RUN_ID or @COMMIT] (e.g. "
        "results/nvidia-h200@81e52c2): a row is faster or slower only when its interval says so",
    )
    parser.add_argument(
        "--threshold",
        type=float,
        default=comparison.THRESHOLD,
        help="with --compare: a change smaller than this share counts as unchanged",
    )
    parser.add_argument(
        "--solution",
        metavar="PATH",
        action="append",
        type=Path,
        help="run this solution file instead of the problem's solutions/ folder "
        "(repeatable; needs --problem)",
    )
    parser.add_argument(
        "--audit",
        dest="audit_only",
        action="store_true",
        help="with --problem or --all: only audit the problems' references (reject any whose "
        "output a zero, constant or memorised answer would match), then exit",
    )
    parser.add_argument(
        "--forget",
        metavar="SOLUTION",
        help="with --problem: drop this solution's rows (by name or path) from the tables under "
        "--results-dir, then re-render them; runs.jsonl keeps its records and gains a removal line",
    )
    parser.add_argument(
        "--no-record",
        dest="recording",
        action="store_false",
        help="run and print the verdicts, but write nothing under --results-dir (logs and "
        "builds are still written)",
    )


def _rule_text() -> str:
    """The stopping rule as harness.settings.StopRule's docstring writes it."""
    paragraph = (settings.StopRule.__doc__ or "").split("\n\n", 1)[1]
    return "\n".join("  " + line.strip() for line in paragraph.strip().splitlines())


def settings_for(args: argparse.Namespace) -> settings.Settings:
    """The run's settings from its flags, with the device, the build targets and the secret
    resolved here, once."""
    import torch

    device = pick_device(args.device)
    on_gpu = device != "cpu"
    capability = torch.cuda.get_device_capability(torch.device(device)) if on_gpu else None
    return settings.from_flags(
        args,
        device=device,
        arch=toolchain.arch_list(capability, args.arch),
        secret=settings.draw_secret(args.secret),
    )


def pick_device(requested: str | None) -> str:
    import torch

    if requested is None:
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UserError(
                f"--device {requested}: no CUDA device is visible here; use --device cpu"
            )
        index = int(requested.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise UserError(
                f"--device {requested}: only {torch.cuda.device_count()} CUDA device(s) visible"
            )
        return f"cuda:{index}"
    if requested != "cpu":
        raise UserError(f"--device {requested!r}: use 'cuda', 'cuda:N' or 'cpu'")
    return requested


def chosen_problems(args: argparse.Namespace) -> list[tuple[ProblemSource, list[Path]]]:
    """The problems to run, each with the solution files to run on it."""
    if args.all:
        sources = [
            resolve_problem(n, PROBLEMS_DIR, SOLUTIONS_DIR) for n in list_problems(PROBLEMS_DIR)
        ]
        if not sources:
            raise UserError(f"no problems found under {PROBLEMS_DIR}")
        return [(s, list(s.solutions)) for s in sources]
    source = resolve_problem(args.problem, PROBLEMS_DIR, SOLUTIONS_DIR)
    if args.solution:
        return [(source, given_solutions(args.solution))]
    if not source.solutions:
        raise UserError(
            f"problem {source.name!r} has no solutions: add a .py file defining ModelNew to "
            f"{SOLUTIONS_DIR / source.name}/ or pass --solution PATH"
        )
    return [(source, list(source.solutions))]


def list_everything() -> int:
    rows = []
    for name in list_problems(PROBLEMS_DIR):
        source = resolve_problem(name, PROBLEMS_DIR, SOLUTIONS_DIR)
        problem = loading.load_problem(name, source.reference)
        solutions = ", ".join(p.stem for p in source.solutions) or "(none)"
        rows.append((name, len(problem.cases), len(problem.benchmarks), solutions))
    from tabulate import tabulate

    print(tabulate(rows, headers=["problem", "cases", "benchmarks", "solutions"]))
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.list:
            return list_everything()
        if args.render:
            return render_everything(args.results_dir)
        if args.compare:
            old, new = args.compare
            print(comparison.render_comparison(old, new, threshold=args.threshold))
            return EXIT_OK
        if args.audit_only:
            return audit_problems(args)
        if args.forget:
            return forget_solution(args.results_dir, args.problem, args.forget)
        work = chosen_problems(args)
        session = Session(settings_for(args), recording=args.recording)
        return run_all(session, work)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INPUT
    except HarnessError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_HARNESS
    except KeyboardInterrupt:
        print("\ninterrupted: results recorded before the interrupt are kept", file=sys.stderr)
        return EXIT_INTERRUPTED


def audit_problems(args: argparse.Namespace) -> int:
    """Audit the chosen problems' references; exit 1 when any is rejected."""
    import torch

    from harness.loading import load_problem
    from harness.run import audit

    names = list_problems(PROBLEMS_DIR) if args.all else [args.problem]
    device = torch.device(pick_device(args.device))
    tolerance = settings.from_flags(args).checking.tolerance  # --atol/--rtol, as a run takes them
    code = EXIT_OK
    for name in names:
        source = resolve_problem(name, PROBLEMS_DIR, SOLUTIONS_DIR)
        try:
            problem = load_problem(source.name, source.reference)
        except UserError as err:  # as a run refuses it: one line, exit 3, the others go on
            print(f"error: {err}", file=sys.stderr)
            code = EXIT_INPUT
            continue
        findings = audit.audit_problem(problem, device, tolerance)
        print(audit.render_findings(source.name, findings))
        if audit.rejected(findings) and code == EXIT_OK:
            code = EXIT_FAILED
    return code


def render_everything(results_dir: Path) -> int:
    """Re-render every table, chart and summary from the run logs under `results_dir`."""
    folders = sorted(p.parent for p in results_dir.glob(f"*/{record.LOG_NAME}"))
    if not folders:
        raise UserError(f"no recorded runs under {results_dir} (no */{record.LOG_NAME})")
    for folder in folders:
        written = rendering.render_folder(folder)
        print(f"rendered {folder}: {', '.join(p.name for p in written)}")
    return EXIT_OK


def forget_solution(results_dir: Path, problem_arg: str, solution: str) -> int:
    """Drop `solution`'s rows of the problem from every results folder that shows them."""
    path = Path(problem_arg)  # named as discovery names it; the problem may be gone from disk
    problem = path.stem if path.suffix == ".py" else path.name
    folders = sorted(p.parent for p in results_dir.glob(f"*/{record.LOG_NAME}"))
    dropped = False
    for folder in folders:
        try:
            if not record.forget(folder, problem, solution):
                continue
            written = [*rendering.render_problem(folder, problem), rendering.render_summary(folder)]
        except OSError as err:
            raise UserError(
                f"--forget: cannot write {folder} ({err.strerror or err}); fix its permissions"
            ) from err
        dropped = True
        print(f"forgot {solution} of {problem} in {folder}; rewrote: {_names(written)}")
    if not dropped:
        shown = {r.solution for f in folders for r in record.read(f) if r.problem == problem}
        raise UserError(
            f"--forget {solution}: no rows of it for problem {problem!r} under {results_dir} "
            f"(recorded there: {', '.join(sorted(shown)) or 'none'}); check the names, or "
            "pass --results-dir"
        )
    return EXIT_OK


def _names(paths: list[Path]) -> str:
    return ", ".join(p.name for p in paths)


def run_all(session: Session, work: list[tuple[ProblemSource, list[Path]]]) -> int:
    code, recorded = EXIT_OK, False
    for source, solutions in work:
        try:
            done = session.run_problem(source, solutions)
        except UserError as err:  # with --all, one broken problem does not stop the others
            print(f"error: {err}", file=sys.stderr)
            code = EXIT_INPUT
            continue
        show_results(session, source.name, done)
        recorded = recorded or (session.recording and bool(done))
        if not all(passed(r) for r in done) and code == EXIT_OK:
            code = EXIT_FAILED
    if recorded:  # only a run that recorded something rewrites the summary
        written = rendering.render_summary(session.folder)
        if len(work) > 1:  # --all ends with the summary across problems
            print(written.read_text(encoding="utf-8"))
        print(f"written: {written}")
    return code


def show_results(session: Session, problem: str, done: list[record.RunRecord]) -> None:
    """Print the problem's table as recorded, or with --no-record this run's rows alone."""
    if not session.recording:
        print(report.markdown_table(report.table_rows(done)))
        print(f"not recorded (--no-record): nothing written under {session.folder.parent}\n")
        return
    table = session.folder / f"{problem}.md"
    print(table.read_text(encoding="utf-8"))
    print(f"written: {table} and {table.with_suffix('.csv').name}\n")


if __name__ == "__main__":
    # Ctrl-C must work whatever was inherited: a background job of a script starts with SIGINT
    # ignored, and Python then leaves it ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(main())
