"""Every flag of run.py and every exit status, declared here once.

The flags of what to do (--problem, --all, --problems, --list, --render, --compare, --audit,
--forget), of scale (--solutions, --gpus, --build-jobs, --resume, --build-only, --ray), and the
settings' own (harness.settings declares each option with its help; settings.add_flags makes
the flag). `parse_args` also refuses the combinations that make no sense, and checks every
value before any work starts; `settings_for` resolves the settings they make (the device,
the build targets, the secret). Imports neither torch nor pandas: `-h` stays fast.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import textwrap
from pathlib import Path

from harness import settings, toolchain, verdicts

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INPUT, EXIT_HARNESS = 0, 1, 2, 3, 4
EXIT_INTERRUPTED = 130
EXIT_MEANING = {
    EXIT_OK: "every solution that could run here was correct",
    EXIT_FAILED: "some failed",
    EXIT_USAGE: "bad flags",
    EXIT_INPUT: "unknown problem, unusable file or unwritable folder",
    EXIT_HARNESS: "the harness itself failed",
    EXIT_INTERRUPTED: "interrupted",
}
HELP_WIDTH = 80  # -h fits this many columns
INDENT, STEP = " " * 17, " " * 5  # continuation lines of the statuses and of the rule's steps


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows defaults where there is one (once: a help that says its own default gets no
    second), keeps the examples and the epilog's tables as written, and wraps the rest within
    HELP_WIDTH columns."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=HELP_WIDTH, max_help_position=28)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        said = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or action.nargs == 0:
            return action.help
        if "(default:" in said:
            return said
        return super()._get_help_string(action)


USAGE = (
    "run.py (--problem NAME | --all | --problems DIR | --list | --render |\n"
    + " " * 15
    + "--compare OLD NEW | --serve) [options]"
)
DESCRIPTION = """\
examples:
  python run.py --problem multilabel_margin      every solution of a problem
  python run.py --problem smooth_l1 --solution <your_kernel.py>
                                                 your file against its reference
  python run.py --all --compile                  all, with torch.compile
  python run.py --list                           what there is to run
  python run.py --problems <problems> --solutions <solutions> --gpus all
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


def build_parser() -> argparse.ArgumentParser:
    """run.py's parser: every flag, its help and default."""
    parser = argparse.ArgumentParser(
        prog="run.py",
        usage=USAGE,
        description=DESCRIPTION,
        epilog=_epilog(),
        formatter_class=HelpFormatter,
    )
    _add_actions(parser)
    add_scale_flags(parser)
    add_service_flags(parser)
    for title, description, cls, nested in SETTINGS_GROUPS:
        settings.add_flags(parser.add_argument_group(title, description), cls, nested)
    return parser


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The flags of `argv`, every value and combination checked (argparse's exit 2 if not)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not any(getattr(args, mode) for mode in MODES):
        if args.forget:
            parser.error("--forget needs --problem (whose table should it drop the rows of?)")
        parser.error(f"say what to do: one of {' '.join('--' + m for m in MODES)}")
    if args.solution and not args.problem:
        parser.error("--solution needs --problem (which reference should it be checked against?)")
    if args.case is not None and not args.problem:
        parser.error("--case needs --problem (case names belong to one problem)")
    if args.solutions and not args.problems:
        parser.error("--solutions needs --problems (a sweep); for one problem use --solution")
    if args.audit_only and not (args.problem or args.all or args.problems):
        parser.error("--audit needs --problem, --all or --problems")
    if args.forget and (not args.problem or args.solution or args.audit_only):
        parser.error("--forget needs --problem, and takes no --solution or --audit")
    if args.machine_folder is not None and not (args.render or args.forget):
        parser.error("--machine-folder goes with --render or --forget")
    if args.machine_folder is not None and Path(args.machine_folder).name in ("", ".", ".."):
        parser.error(
            f"--machine-folder {args.machine_folder!r}: name a folder, such as nvidia-h200"
        )
    if args.machine_folder is not None and Path(args.machine_folder).name != args.machine_folder:
        parser.error(
            f"--machine-folder {args.machine_folder}: takes a folder's name under --results-dir "
            "(such as nvidia-h200), not a path; --results-dir says where those folders are"
        )
    if args.problem_dir is not None and not args.serve:
        parser.error("--problem-dir goes with --serve (a sweep names its folder with --problems)")
    if args.serve and (args.solution or args.forget or args.audit_only or args.build_only):
        parser.error("--serve takes no --solution, --forget, --audit or --build-only")
    if not args.recording and (args.forget or args.audit_only or not (args.problem or args.all)):
        parser.error(f"--no-record is for a run (--problem or --all), not {_mode(args)}")
    try:  # the values alone, before the device is resolved: bad flags fail before any work
        settings.from_flags(args)
        settings.within("--threshold", args.threshold, 0, 1)
        if args.build_jobs is not None:
            settings.within("--build-jobs", args.build_jobs, 1)
        settings.within("--port", args.port, 1, 65535)
        within_bounds(parser, args)
    except ValueError as err:
        parser.error(str(err))
    return args


MODES = ("problem", "all", "problems", "list", "render", "compare", "serve")  # one is required
# The most each flag may ask for (its least is the settings' own check): beyond these a value
# is a typo, not a wish (--trials 1000000000 would check for years)
MOST = {
    "trials": 1000,
    "kernelbench_trials": 100_000,
    "max_samples": 1_000_000,
    "warmup_ms": 600_000.0,
    "budget_ms": 3_600_000.0,
    "build_s": 86_400.0,
    "run_s": 86_400.0,
    "build_jobs": 1024,
    "max_processes": 1 << 22,  # Linux's largest pid_max
}


def within_bounds(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse a value above its flag's bound (MOST) or a --memory-gb above this machine's
    memory (ValueError, naming the flag). A --min-samples above the --max-samples given with
    it is refused by the stop rule itself."""
    flags = {a.dest: a.option_strings[0] for a in parser._actions if a.option_strings}
    for name, most in MOST.items():
        value = getattr(args, name, None)
        if value is not None and value > most:
            shown = [f"{n:g}" if isinstance(n, float) else str(n) for n in (most, value)]
            raise ValueError(f"{flags[name]} must be at most {shown[0]} (got {shown[1]})")
    memory_gb = machine_memory_gb()
    if args.memory_gb is not None and memory_gb and args.memory_gb > memory_gb:
        raise ValueError(
            f"--memory-gb {args.memory_gb:g} is more than this machine's {memory_gb:.0f} GiB: "
            "give at most that"
        )


def machine_memory_gb() -> float | None:
    """This machine's memory in GiB, where the system says (None elsewhere)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return None


def _mode(args: argparse.Namespace) -> str:
    """The flag that says what `args` do, other than a run of --problem or --all."""
    for flag in ("forget", "audit_only", "render", "compare", "list", "problems"):
        if getattr(args, flag):
            return "--audit" if flag == "audit_only" else f"--{flag}"
    return "this"


def _epilog() -> str:
    statuses = "\n".join(
        _wrapped(meaning, f"  {name:<14} ", INDENT) for name, meaning in verdicts.MEANING.items()
    )
    exits = "; ".join(f"{code} {meaning}" for code, meaning in EXIT_MEANING.items())
    return f"timing rule:\n{_rule_text()}\n\nstatuses:\n{statuses}\n\n" + _wrapped(
        f"exit status: {exits}", "", "  "
    )


def _add_actions(parser: argparse.ArgumentParser) -> None:
    """What to do: run problems, list, render, compare or audit; and which solutions."""
    what = parser.add_mutually_exclusive_group()  # one is required: parse_args says so
    what.add_argument(
        "--problem",
        metavar="NAME|PATH",
        help="a problem under problems/, a KernelBench .py file, or a problem "
        "folder (reference.py, or GPUCodeForces' example_torchcode.py)",
    )
    what.add_argument("--all", action="store_true", help="every problem under problems/")
    add_sweep(what)
    what.add_argument("--list", action="store_true", help="list problems and solutions, then exit")
    what.add_argument(
        "--render",
        action="store_true",
        help="re-render every table, chart and the summary of this machine's folder under "
        "--results-dir (or --machine-folder's) from its recorded runs, then exit",
    )
    what.add_argument(
        "--compare",
        nargs=2,
        metavar=("OLD", "NEW"),
        help="compare two recorded runs, each FOLDER[@RUN_ID or @COMMIT] (e.g. "
        "results/nvidia-h200@81e52c2): a row is faster or slower only when its interval says so",
    )
    what.add_argument(
        "--serve",
        action="store_true",
        help="judge solutions submitted over HTTP (see 'service' below) until interrupted",
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
        help="with --problem, --all or --problems: only audit the problems' references (name "
        "where a zero, constant or memorised answer would pass, refuse a failing one), then "
        "exit",
    )
    _add_keeping(parser)


def _add_keeping(parser: argparse.ArgumentParser) -> None:
    """What is kept: --forget, the folder it and --render act on, and --no-record."""
    parser.add_argument(
        "--forget",
        metavar="SOLUTION",
        help="with --problem: drop this solution's rows (by name or path) from the tables of "
        "this machine's folder under --results-dir (or --machine-folder's), then re-render "
        "them; runs.jsonl keeps its records and gains a removal line",
    )
    parser.add_argument(
        "--machine-folder",
        metavar="NAME",
        help="with --render or --forget: act on <results-dir>/NAME (such as nvidia-h200) "
        "instead of this machine's folder, the one a run here writes (cpu without a GPU)",
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


def add_sweep(what: argparse._MutuallyExclusiveGroup) -> None:
    """--problems, beside run.py's other choices of what to do."""
    what.add_argument(
        "--problems",
        metavar="DIR",
        type=Path,
        help="sweep every problem in DIR (KernelBench .py files, or problem folders) against "
        "the solutions of --solutions, matched by name",
    )


def add_service_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of --serve: where it listens, where its queue lives, which problems it takes."""
    group = parser.add_argument_group(
        "service", "run.py --serve (tokens: HARNESS_TOKENS, else --state-dir's token file)"
    )
    group.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to listen on (another than loopback lets other machines submit)",
    )
    group.add_argument("--port", type=int, default=8000, help="the port to listen on")
    group.add_argument(
        "--state-dir",
        metavar="DIR",
        type=Path,
        default=settings.REPO / "served",
        help="the queue (SQLite), the submitted sources and the token file",
    )
    group.add_argument(
        "--problem-dir",
        metavar="DIR",
        type=Path,
        help="beside problems/: a folder of problems submissions may name (a KernelBench "
        "level's files by their stem)",
    )


def add_scale_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of scale: how many builds at once, which GPUs judge, Ray, and --resume."""
    group = parser.add_argument_group(
        "scale", "builds in parallel, every GPU busy, sweeps and Ray (none change a verdict)"
    )
    group.add_argument(
        "--solutions",
        metavar="DIR",
        type=Path,
        help="with --problems: where the sweep's solutions are, matched by problem name: "
        "DIR/<problem>/*.py, or KernelBench's level_<L>_problem_<N>_sample_<S>_kernel.py "
        "(default: solutions/)",
    )
    group.add_argument(
        "--gpus",
        metavar="all|LIST",
        help="judge on these GPUs at once, one solution per GPU (each timing has its GPU to "
        "itself): 'all' or indices such as 0,1 (default: --device alone)",
    )
    group.add_argument(
        "--build-jobs",
        metavar="N",
        type=int,
        help="build this many solutions at once (default: one per two cores); judging starts "
        "with the first one built",
    )
    group.add_argument(
        "--resume",
        action="store_true",
        help="skip each solution already recorded under --results-dir for the same content, "
        "reference, toolchain and settings (an interrupted sweep goes on where it stopped)",
    )
    group.add_argument(
        "--build-only",
        action="store_true",
        help="build the selected solutions (as many at once as --build-jobs) into the build "
        "cache, then stop: nothing is checked, timed or recorded",
    )
    group.add_argument(
        "--ray",
        metavar="auto|ADDRESS",
        help="run on a Ray cluster (pip install -r requirements-ray.txt): builds as CPU tasks, "
        "one judging actor per GPU; 'auto' finds the cluster this host belongs to",
    )


def settings_for(
    args: argparse.Namespace, device: str | None, capability: tuple[int, int] | None
) -> settings.Settings:
    """The run's settings from its flags, with the device, the build targets and the secret
    resolved here, once: on this host, or as a Ray cluster's judges see them (`device` and
    `capability` given)."""
    import torch

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
            raise verdicts.UserError(
                f"--device {requested}: no CUDA device is visible here; use --device cpu"
            )
        index = int(requested.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise verdicts.UserError(
                f"--device {requested}: only {torch.cuda.device_count()} CUDA device(s) visible"
            )
        return f"cuda:{index}"
    if requested != "cpu":
        raise verdicts.UserError(f"--device {requested!r}: use 'cuda', 'cuda:N' or 'cpu'")
    return requested
