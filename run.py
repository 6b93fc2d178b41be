"""Check and time JIT-compiled kernel solutions against PyTorch references.

    python run.py --problem multilabel_margin     every solution of one problem
    python run.py --all                           every problem under problems/
    python run.py --problem smooth_l1 --solution path/to/mine.py
    python run.py --list                          what there is to run
    python run.py --all --audit                   audit the problems' references only

Exit status: 0 when every solution that could run here ran and was correct (a CUDA solution
skipped for lack of a GPU is not a failure); 1 when any solution failed; 2 for bad flags;
3 for an unknown problem or an unusable file; 130 when interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from harness import files, loading, status
from harness.errors import UserError
from harness.measure import timing as timing_module
from harness.measure.timing import StopRule
from harness.results import comparison, rendering, summary
from harness.run.discovery import (
    ProblemSource,
    list_problems,
    missing_model_new,
    resolve_problem,
)
from harness.run.session import REPO, Options, Session, passed

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
PROBLEMS_DIR = REPO / "problems"
SOLUTIONS_DIR = REPO / "solutions"


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows defaults where there is one, and keeps the epilog's status table as written."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False, argparse.SUPPRESS):
            return action.help
        return super()._get_help_string(action)


DESCRIPTION = """\
Build each solution in its own process, check it against the reference on every declared
case, time both with CUDA events (L2 flushed before each call) or, without a GPU, a wall
clock, and record the results under <results-dir>/<machine>/."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    d = Options()
    statuses = "\n".join(f"  {name:<14} {meaning}" for name, meaning in status.MEANING.items())
    parser = argparse.ArgumentParser(
        prog="run.py",
        description=DESCRIPTION,
        epilog=f"timing rule:\n{_rule_text()}\n\nstatuses:\n{statuses}\n\nexit status: 0 every "
        "solution that could run here was "
        "correct; 1 some failed;\n  2 bad flags; 3 unknown problem or unusable file; 130 "
        "interrupted",
        formatter_class=HelpFormatter,
    )
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
        default=0.02,
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
        "--device",
        default=None,
        help="'cuda', 'cuda:N' or 'cpu' (default: cuda when a GPU is visible)",
    )
    parser.add_argument(
        "--trials",
        type=int,
        default=d.trials,
        help="correctness trials per case, each with a fresh seed and inputs",
    )
    parser.add_argument("--seed", type=int, default=d.seed, help="base seed of the trials")
    parser.add_argument(
        "--secret",
        type=int,
        default=None,
        help="the run's secret, mixed into every input seed (default: a fresh random one per "
        "run, recorded with its results; pass a recorded one to draw the same inputs again, "
        "or 0 for the public seeds alone)",
    )
    parser.add_argument(
        "--audit",
        action="store_true",
        help="with --problem or --all: only audit the problems' references (reject any whose "
        "output a zero, constant or memorised answer would match), then exit",
    )
    parser.add_argument(
        "--no-audit",
        action="store_true",
        help="run a problem even when its audit rejects it",
    )
    timing = parser.add_argument_group(
        "timing", "the stopping rule (see 'timing rule' below); defaults in harness/timing.py"
    )
    rule = d.rule
    timing.add_argument(
        "--warmup-ms",
        type=float,
        default=rule.warmup_ms,
        help="untimed rounds first, for this long",
    )
    timing.add_argument(
        "--min-samples", type=int, default=rule.min_samples, help="samples per call, at least"
    )
    timing.add_argument(
        "--max-samples", type=int, default=rule.max_samples, help="samples per call, at most"
    )
    timing.add_argument(
        "--target-rse",
        type=float,
        default=rule.target_rse,
        help="stop once each call's relative standard error of the mean is below this",
    )
    timing.add_argument(
        "--budget-ms",
        type=float,
        default=rule.budget_ms,
        help="sampling time per benchmark shape, at most (never below --min-samples)",
    )
    timing.add_argument(
        "--graph",
        action="store_true",
        help="time CUDA-graph replays over rotated input sets (no launch overhead; for "
        "microsecond kernels)",
    )
    timing.add_argument(
        "--flush",
        choices=["read", "write"],
        default=d.flush,
        help="how L2 is emptied before each call: read a 2x L2 buffer (clean lines), or write "
        "it as triton's do_bench does (dirty lines the call must write back)",
    )
    timing.add_argument(
        "--compile",
        action="store_true",
        help="also time the reference under torch.compile (compile time excluded; cached per "
        "GPU and torch version in <machine>/baselines.jsonl)",
    )
    timing.add_argument(
        "--no-baseline-cache",
        action="store_true",
        help="with --compile: measure the baseline again instead of using the cached one",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=d.timeout_s,
        metavar="SECONDS",
        help="limit for each of the check and time steps of a solution",
    )
    parser.add_argument(
        "--build-timeout",
        type=float,
        default=d.build_timeout_s,
        metavar="SECONDS",
        help="limit for importing (building) a solution",
    )
    parser.add_argument(
        "--arch",
        default=d.arch,
        help="TORCH_CUDA_ARCH_LIST to build for (default: the GPU present; "
        "without one, $TORCH_CUDA_ARCH_LIST or 9.0)",
    )
    parser.add_argument(
        "--atol", type=float, default=d.atol, help="absolute tolerance, overriding the problem's"
    )
    parser.add_argument(
        "--rtol", type=float, default=d.rtol, help="relative tolerance, overriding the problem's"
    )
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=_relative(d.results_dir),
        help="where tables and the run log go (a folder per machine inside)",
    )
    parser.add_argument(
        "--build-dir",
        type=Path,
        default=_relative(d.cache_dir),
        help="cache of built extensions, a folder per solution content",
    )
    parser.add_argument(
        "--log-dir",
        type=Path,
        default=_relative(d.log_dir),
        help="full log of every solution's worker, a folder per run",
    )
    args = parser.parse_args(argv)
    if args.solution and not args.problem:
        parser.error("--solution needs --problem (which reference should it be checked against?)")
    if args.trials < 1:
        parser.error("--trials must be at least 1")
    if args.secret is not None and args.secret < 0:
        parser.error("--secret must be 0 or a positive integer")
    if args.audit and not (args.problem or args.all):
        parser.error("--audit needs --problem or --all")
    try:
        args.rule = StopRule(
            warmup_ms=args.warmup_ms,
            min_samples=min(args.min_samples, args.max_samples),
            max_samples=args.max_samples,
            target_rse=args.target_rse,
            budget_ms=args.budget_ms,
        )
    except ValueError as err:
        parser.error(f"timing flags: {err}")
    return args


def _rule_text() -> str:
    """The stopping rule as harness/timing.py's docstring writes it (its second paragraph)."""
    paragraph = (timing_module.__doc__ or "").split("\n\n")[1]
    return "\n".join("  " + line.strip() for line in paragraph.splitlines()[1:])


def _relative(path: Path) -> Path:
    """A default path as the user would type it from where they stand."""
    return Path(os.path.relpath(path))


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
        for path in args.solution:
            if not path.is_file():
                raise UserError(f"--solution {path}: no such file")
            reason = missing_model_new(path)
            if reason:
                raise UserError(f"--solution {path}: {reason}")
        return [(source, [p.resolve() for p in args.solution])]
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
        if args.audit:
            return audit_problems(args)
        work = chosen_problems(args)
        options = Options(
            device=pick_device(args.device),
            trials=args.trials,
            seed=args.seed,
            secret=args.secret,
            audit=not args.no_audit,
            rule=args.rule,
            graph=args.graph,
            flush=args.flush,
            compile=args.compile,
            baseline_cache=not args.no_baseline_cache,
            timeout_s=args.timeout,
            build_timeout_s=args.build_timeout,
            arch=args.arch,
            atol=args.atol,
            rtol=args.rtol,
            results_dir=args.results_dir.resolve(),
            cache_dir=args.build_dir.resolve(),
            log_dir=args.log_dir.resolve(),
        )
        session = Session(options)
        return run_all(session, work)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INPUT
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
    code = EXIT_OK
    for name in names:
        source = resolve_problem(name, PROBLEMS_DIR, SOLUTIONS_DIR)
        try:
            problem = load_problem(source.name, source.reference)
        except UserError as err:
            print(f"{source.name}: reject error: {err}")
            code = EXIT_FAILED
            continue
        findings = audit.audit_problem(problem, device)
        print(audit.render_findings(source.name, findings))
        if audit.rejected(findings):
            code = EXIT_FAILED
    return code


def render_everything(results_dir: Path) -> int:
    """Re-render every table, chart and summary from the run logs under `results_dir`."""
    folders = sorted(p.parent for p in results_dir.glob(f"*/{files.LOG_NAME}"))
    if not folders:
        raise UserError(f"no recorded runs under {results_dir} (no */{files.LOG_NAME})")
    for folder in folders:
        written = rendering.render_folder(folder)
        print(f"rendered {folder}: {', '.join(p.name for p in written)}")
    return EXIT_OK


def run_all(session: Session, work: list[tuple[ProblemSource, list[Path]]]) -> int:
    code = EXIT_OK
    for source, solutions in work:
        try:
            done = session.run_problem(source, solutions)
        except UserError as err:  # with --all, one broken problem does not stop the others
            print(f"error: {err}", file=sys.stderr)
            code = EXIT_INPUT
            continue
        table = session.folder / f"{source.name}.md"
        print(table.read_text(encoding="utf-8"))
        print(f"written: {table} and {table.with_suffix('.csv').name}\n")
        if not all(passed(r) for r in done) and code == EXIT_OK:
            code = EXIT_FAILED
    if session.folder.joinpath(files.LOG_NAME).exists():
        written = summary.write_summary(session.folder)
        if len(work) > 1:  # --all ends with the summary across problems
            print(written.read_text(encoding="utf-8"))
        print(f"written: {written}")
    return code


if __name__ == "__main__":
    sys.exit(main())
