"""Check and time JIT-compiled kernel solutions against PyTorch references.

    python run.py --problem multilabel_margin     every solution of one problem
    python run.py --all                           every problem under problems/
    python run.py --problem smooth_l1 --solution path/to/mine.py
    python run.py --problem smooth_l1 --solution fast_cuda --case default --check-only
    python run.py --list                          what there is to run
    python run.py --all --audit                   audit the problems' references only
    python run.py --problem smooth_l1 --forget mine   drop a solution's rows from the tables
    python run.py --problems DIR --solutions DIR --gpus all --resume   a sweep, every GPU

Exit status: 0 when every solution that could run here ran and was correct (a CUDA solution
skipped for lack of a GPU is not a failure); 1 when any solution failed; 2 for bad flags;
3 for an unknown problem, an unusable file or a folder that cannot be written; 4 when the
harness itself failed (nothing is recorded against the solution it was running); 130 when
interrupted.

`-h` imports neither torch nor pandas: the modules that need them are imported where they are
used.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import signal
import sys
import textwrap
from pathlib import Path

from harness import settings, status
from harness.errors import HarnessError, UserError
from harness.run import driving
from harness.run.driving import EXIT_FAILED, EXIT_INPUT, EXIT_OK, PROBLEMS_DIR, SOLUTIONS_DIR

EXIT_USAGE, EXIT_HARNESS, EXIT_INTERRUPTED = 2, 4, 130  # beside driving's EXIT_OK, _FAILED, _INPUT
HELP_WIDTH = 80  # -h fits this many columns
INDENT, STEP = " " * 17, " " * 5  # continuation lines of the statuses and of the rule's steps


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows defaults where there is one, keeps the examples and the epilog's tables as
    written, and wraps the rest within HELP_WIDTH columns."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=HELP_WIDTH, max_help_position=28)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False, argparse.SUPPRESS) or action.nargs == 0:
            return action.help
        return super()._get_help_string(action)


USAGE = (
    "run.py (--problem NAME | --all | --problems DIR | --list | --render |\n"
    + " " * 15
    + "--compare OLD NEW) [options]"
)
DESCRIPTION = """\
examples:
  python run.py --problem multilabel_margin      every solution of a problem
  python run.py --problem smooth_l1 --solution my_kernel.py
                                                 your file against its reference
  python run.py --all --compile                  all, with torch.compile
  python run.py --list                           what there is to run
  python run.py --problems suite/problems --solutions suite/solutions --gpus all
                                                 a sweep, on every GPU
  python run.py --compare results/nvidia-h200@a000051 results/nvidia-h200
                                                 commit a000051's run against
                                                 the newest, shape by shape

Each solution is built in its own process, checked against the reference on
every declared case, and timed beside it: CUDA events with L2 flushed before
each call on a GPU, a wall clock on a CPU. Results go to
<results-dir>/<machine>/ (a table per problem, and every sample in runs.jsonl)."""


SETTINGS_GROUPS = (  # (title, description, settings class, with the settings it holds)
    ("device, build and audit", None, settings.Settings, False),
    ("checking", "how a solution is judged", settings.Checking, True),
    ("timing", "the stopping rule (see 'timing rule' below) and the timer", settings.Timing, True),
    ("limits", "when a solution's worker is killed", settings.Limits, True),
    ("places", "where results, builds and logs go", settings.Places, True),
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="run.py",
        usage=USAGE,
        description=DESCRIPTION,
        epilog=_epilog(),
        formatter_class=HelpFormatter,
    )
    _add_actions(parser)
    driving.add_flags(parser)
    for title, description, cls, nested in SETTINGS_GROUPS:
        settings.add_flags(parser.add_argument_group(title, description), cls, nested)
    args = parser.parse_args(argv)
    if args.solution and not args.problem:
        parser.error("--solution needs --problem (which reference should it be checked against?)")
    if args.case is not None and not args.problem:
        parser.error("--case needs --problem (case names belong to one problem)")
    if args.solutions and not args.problems:
        parser.error("--solutions needs --problems (a sweep); for one problem use --solution")
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
    statuses = "\n".join(
        _wrapped(meaning, f"  {name:<14} ", INDENT) for name, meaning in status.MEANING.items()
    )
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
    driving.add_sweep(what)
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
        default=settings.COMPARE_THRESHOLD,
        help="with --compare: a change smaller than this share counts as unchanged",
    )
    parser.add_argument(
        "--solution",
        metavar="NAME|PATH",
        action="append",
        type=Path,
        help="run this solution instead of all of the problem's: a file, or the name of one "
        "under solutions/<problem>/ (repeatable; needs --problem)",
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
    """The stopping rule as harness.settings.StopRule's docstring writes it, its fields named
    by their flags (`warmup_ms` as --warmup-ms), each step wrapped within HELP_WIDTH."""
    paragraph = (settings.StopRule.__doc__ or "").split("\n\n", 1)[1]
    for f in dataclasses.fields(settings.StopRule):
        paragraph = paragraph.replace(f"`{f.name}`", "--" + f.name.replace("_", "-"))
    steps = re.split(r"\n\s*(?=\d\. )", paragraph.strip())
    return "\n".join(_wrapped(" ".join(step.split()), "  ", STEP) for step in steps)


def _wrapped(text: str, first: str, rest: str) -> str:
    return textwrap.fill(text, HELP_WIDTH, initial_indent=first, subsequent_indent=rest)


def settings_for(
    args: argparse.Namespace, device: str | None, capability: tuple[int, int] | None
) -> settings.Settings:
    """The run's settings from its flags, with the device, the build targets and the secret
    resolved here, once: on this host, or as a Ray cluster's judges see them (`device` and
    `capability` given)."""
    import torch

    from harness import toolchain

    if device is None:
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


def list_everything() -> int:
    from tabulate import tabulate

    from harness import loading
    from harness.run.discovery import list_problems, resolve_problem

    rows = []
    for name in list_problems(PROBLEMS_DIR):
        source = resolve_problem(name, PROBLEMS_DIR, SOLUTIONS_DIR)
        problem = loading.load_problem(name, source.reference)
        solutions = ", ".join(p.stem for p in source.solutions) or "(none)"
        rows.append((name, len(problem.cases), len(problem.benchmarks), solutions))
    print(tabulate(rows, headers=["problem", "cases", "benchmarks", "solutions"]))
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.list:
            return list_everything()
        if args.render:
            from harness.run import keeping

            keeping.render_everything(args.results_dir)
            return EXIT_OK
        if args.compare:
            from harness.results import comparison

            old, new = args.compare
            print(comparison.render_comparison(old, new, threshold=args.threshold))
            return EXIT_OK
        if args.audit_only:
            return audit_problems(args)
        if args.forget:
            from harness.run import keeping

            keeping.forget_solution(args.results_dir, args.problem, args.forget)
            return EXIT_OK
        return driving.run_all(args, settings_for)
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
    from harness.run.discovery import list_problems, resolve_problem

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


if __name__ == "__main__":
    # Ctrl-C must work whatever was inherited: a background job of a script starts with SIGINT
    # ignored, and Python then leaves it ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(main())
