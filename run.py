"""Check and time JIT-compiled kernel solutions against PyTorch references.

    python run.py --problem multilabel_margin     every solution of one problem
    python run.py --all                           every problem under problems/
    python run.py --problem smooth_l1 --solution <your_solution.py>
    python run.py --problem smooth_l1 --solution fast_cuda --case default --check-only
    python run.py --list                          what there is to run
    python run.py --all --audit                   audit the problems' references only
    python run.py --problem smooth_l1 --forget <solution>   drop its rows from this machine's
    python run.py --problems <dir> --solutions <dir> --gpus all --resume   a sweep, every GPU

(<...> marks what to put in: a file, a solution's name or path, a folder.)

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
import signal
import sys

from harness import settings
from harness.run import driving
from harness.run.driving import PROBLEMS_DIR, SOLUTIONS_DIR
from harness.run.flags import (
    EXIT_FAILED,
    EXIT_HARNESS,
    EXIT_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    HELP_WIDTH,
    parse_args,
    settings_for,
)
from harness.verdicts import HarnessError, UserError

__all__ = ["EXIT_FAILED", "EXIT_USAGE", "HELP_WIDTH", "main", "settings_for"]  # with the tests'


def acted_on(args: argparse.Namespace) -> driving.Chosen:
    """The results folder --render or --forget acts on: --machine-folder's, else the one a run
    with the same flags writes on this machine."""
    if args.machine_folder is not None:
        return driving.Chosen(args.results_dir.resolve() / args.machine_folder, named=True)
    import torch

    from harness.run import machine

    ours = settings_for(args, None, None)
    folder = machine.results_folder(
        ours, machine.describe(torch.device(ours.device), settings.REPO)
    )
    return driving.Chosen(folder, named=False)


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
            driving.render_folder(acted_on(args))
            return EXIT_OK
        if args.compare:
            from harness.results import comparison

            old, new = args.compare
            print(comparison.render_comparison(old, new, threshold=args.threshold))
            return EXIT_OK
        if args.serve:
            from harness.run import service

            return service.serve(args)
        if args.audit_only:
            return audit_problems(args)
        if args.forget:
            driving.forget_solution(acted_on(args), args.problem, args.forget)
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
    """Audit the chosen problems' references (on a GPU in a worker, as a run does); exit 1
    when any is refused (its reference fails; a weakness too under --strict-audit)."""
    from harness.loading import load_problem
    from harness.measure import audit
    from harness.run import isolate
    from harness.run.discovery import list_problems, resolve_problem, sweep_sources
    from harness.run.session import Session

    session = Session(settings_for(args, None, None), recording=False)
    for line in session.created:
        print(line)
    run_job = lambda job: isolate.run_isolated(job, lambda event: None)  # noqa: E731
    code = EXIT_OK
    if args.problems:  # every problem file of a folder, KernelBench's levels say
        sources = sweep_sources(args.problems, args.solutions or args.problems)
    else:
        names = list_problems(PROBLEMS_DIR) if args.all else [args.problem]
        sources = [resolve_problem(name, PROBLEMS_DIR, SOLUTIONS_DIR) for name in names]
    session.auditing.audit_all(sources, run_job)  # on a GPU, all in one worker
    for source in sources:
        try:
            problem = load_problem(source.name, source.reference)
            findings = session.auditing.findings(source, problem, run_job)
        except UserError as err:  # as a run refuses it: one line, exit 3, the others go on
            print(f"error: {err}", file=sys.stderr)
            code = EXIT_INPUT
            continue
        print(audit.render_findings(source.name, findings))
        if audit.refused(findings, session.settings.strict_audit) and code == EXIT_OK:
            code = EXIT_FAILED
    return code


if __name__ == "__main__":
    from harness.run import processes

    # Ctrl-C must work whatever was inherited: a background job of a script starts with SIGINT
    # ignored, and Python then leaves it ignored. SIGTERM and SIGHUP stop a run as Ctrl-C
    # does, and an interrupted run ends every process it started (harness/run/processes.py).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(processes.run_to_end(main))
