"""The command that replays one failed solution, printed under its verdict.

It names the same problem and file, the run's seed, secret and trials, and the flags the run
changed that bear on the verdict. A failure while checking is replayed on the case it failed on
alone, checks only (`--case NAME --check-only`); a failure while timing (a benchmark's check, a
timed call, the profiler's check) by the whole run, timing flags included, as only that reaches
the failing step again.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from harness import verdicts
from harness.record import RunRecord
from harness.run.discovery import GPUCODEFORCES_REFERENCE, REFERENCE_FILE, ProblemSource
from harness.settings import REPO, changed_flags, typed

REPLAYED = frozenset(
    {
        verdicts.INCORRECT,
        verdicts.REJECTED,
        verdicts.CRASHED,
        verdicts.RUNTIME_ERROR,
        verdicts.TIMEOUT,
    }
)
PROBLEMS_DIR = REPO / "problems"  # where run.py looks a problem's name up
DEFAULT_DEVICE = "cuda:0"  # what run.py picks on a machine with a GPU
STEPS = ("check", "time")  # the steps a timeout is replayed from
# Options written out always, or by the replay itself, or that cannot change a verdict.
NOT_COPIED = frozenset(
    {"seed", "secret", "trials", "case", "check_only", "device", "arch", "ncu", "compile"}
    | {"baseline_cache"}
)


def command(
    ran: RunRecord,
    source: ProblemSource,
    solution: Path,
    phase: str | None,
    case: str | None,
    recording: bool = True,
) -> str | None:
    """The command line that replays `ran`, or None when its status is not a failure to replay.
    `phase` and `case` say where the worker was when it failed (harness.run.isolate); a run
    that recorded nothing (--no-record) is replayed without recording too."""
    if ran.status not in REPLAYED or (ran.status == verdicts.TIMEOUT and phase not in STEPS):
        return None  # not a failure, or a build that ran too long: nothing of the run to replay
    settings = ran.settings
    checking = settings.checking
    timed = phase == "time"
    chosen = checking.case if timed or case is None else case
    words = ["python", str(typed(REPO / "run.py")), "--problem", problem_arg(source)]
    words += ["--solution", str(typed(solution))]
    words += ["--case", chosen] if chosen is not None else []
    words += ["--seed", str(checking.seed), "--secret", str(checking.secret)]
    words += ["--trials", str(checking.trials)]
    if settings.device != DEFAULT_DEVICE:
        words += ["--device", settings.device]
    words += changed_flags(settings, NOT_COPIED if timed else NOT_COPIED | {"timing"})
    words += [] if timed else ["--check-only"]
    words += [] if recording else ["--no-record"]
    return shlex.join(words)


def problem_arg(source: ProblemSource) -> str:
    """What `--problem` takes to find `source` again: its name for a problem under problems/,
    else the path of its folder or file."""
    reference = source.reference
    if reference == (PROBLEMS_DIR / source.name / REFERENCE_FILE).resolve():
        return source.name
    if reference.name in (REFERENCE_FILE, GPUCODEFORCES_REFERENCE) and (
        reference.parent.name == source.name
    ):
        return str(typed(reference.parent))  # a problem folder
    return str(typed(reference))  # a KernelBench file
