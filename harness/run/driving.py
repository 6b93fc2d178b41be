"""run.py's runs: which problems and solutions, where they run (this host's pool, or a Ray
cluster), and what is printed at the end (each problem's rows; a sweep's geomean and fast_p).

run.py --render and --forget: the recorded results of one machine's folder, re-rendered or
trimmed, without a run.

Each acts on one folder under --results-dir, and names it before it writes: this machine's
(the folder a run with the same flags writes here: `results/cpu` without a GPU), or the one
--machine-folder names. A folder of another machine (the committed `results/nvidia-h200`) is
changed only where the user names it.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.run.flags import EXIT_FAILED, EXIT_INPUT, EXIT_OK
from harness.settings import REPO, typed
from harness.verdicts import UserError

if TYPE_CHECKING:
    from harness.record import RunRecord
    from harness.run.discovery import ProblemSource
    from harness.run.scheduler import Judging
    from harness.run.session import Session

PROBLEMS_DIR = REPO / "problems"
SOLUTIONS_DIR = REPO / "solutions"
KERNELBENCH_SAMPLE = "level_<L>_problem_<N>_sample_<S>_kernel.py"  # KernelBench's layout
Work = list[tuple["ProblemSource", list[Path]]]


def chosen_problems(args: argparse.Namespace) -> tuple[Work, list[str]]:
    """The problems to run, each with the solution files to run on it; and the problems of a
    sweep that have no solution (there is nothing of theirs to judge)."""
    from harness.run.discovery import (
        given_solutions,
        list_problems,
        resolve_problem,
        sweep_sources,
    )

    if args.problems:
        solutions = args.solutions or SOLUTIONS_DIR
        sources = sweep_sources(args.problems, solutions)
        missing = [s.name for s in sources if not s.solutions]
        looked_for = f"{solutions}/<problem>/*.py or {solutions}/{KERNELBENCH_SAMPLE}"
        if len(missing) == len(sources):
            raise UserError(
                f"no solutions in {solutions} for any of the {len(sources)} problem(s) of "
                f"{args.problems}: a sweep looks for {looked_for}"
            )
        if missing:
            shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
            print(
                f"note: no solutions for {len(missing)} problem(s): {shown} "
                f"(looked for {looked_for})"
            )
        return [(s, list(s.solutions)) for s in sources if s.solutions], missing
    if args.all:
        sources = [
            resolve_problem(n, PROBLEMS_DIR, SOLUTIONS_DIR) for n in list_problems(PROBLEMS_DIR)
        ]
        if not sources:
            raise UserError(f"no problems found under {PROBLEMS_DIR}")
        return [(s, list(s.solutions)) for s in sources], []
    source = resolve_problem(args.problem, PROBLEMS_DIR, SOLUTIONS_DIR)
    if args.solution:
        return [(source, given_solutions(args.solution, source))], []
    if not source.solutions:
        raise UserError(
            f"problem {source.name!r} has no solutions: add a .py file defining ModelNew to "
            f"{SOLUTIONS_DIR / source.name}/ or pass --solution PATH"
        )
    return [(source, list(source.solutions))], []


def run_all(args: argparse.Namespace, resolve: Any) -> int:
    """Run `args`' work on this host's pool or on Ray; `resolve(args, device, capability)`
    makes the settings (run.py's)."""
    work, unsolved = chosen_problems(args)
    session, pool = start(args, work, resolve, args.recording and not args.build_only)
    if args.build_only:
        return build_work(session, work, pool)
    sweep = bool(args.problems or args.ray or len(pool.slots) > 1)
    return run_work(session, work, pool, sweep=sweep, again=args.resume, unsolved=unsolved)


def start(args: argparse.Namespace, work: Work, resolve: Any, recording: bool) -> tuple[Any, Any]:
    """The session and the pool (this host's, or Ray's with --ray) that judge `work`, its
    sandbox begun (it ends with the pool)."""
    from harness.run import pool as local
    from harness.run import staging
    from harness.run.session import Session

    if args.ray:
        from harness.run import raypool

        pool: Any = raypool.connect(args.ray, args.build_jobs)  # None: as the cluster's CPUs allow
        settings = resolve(args, pool.device, pool.capability)
        print(pool.shown, file=sys.stderr)  # the cluster first
        session = Session(settings, recording=recording, described=pool.described())
        said = pool.sandbox(settings, work)  # on every judge; each build task's too
        for line in [*session.created, *said]:
            print(line)
        return session, pool
    settings = resolve(args, None, None)
    session = Session(settings, recording=recording)  # its folders checked first
    pool = local.LocalPool(
        local.gpu_devices(args.gpus, settings.device), local.build_jobs(args.build_jobs)
    )
    off = staging.begin(settings, work)  # ended with the pool
    for line in [*session.created, *([off] if off else [])]:
        print(line)
    return session, pool


def judge_work(args: argparse.Namespace, work: Work) -> list[Judging]:
    """Judge `work` as a sweep with `args`' settings, printing no rows: each record appended
    and its problem's tables re-rendered as a run's, then the summary (harness.run.evaluator
    and the service). How each problem ended."""
    from harness.results import rendering
    from harness.run.flags import settings_for
    from harness.run.reporting import Report
    from harness.run.scheduler import Scheduler

    session, pool = start(args, work, settings_for, recording=True)
    try:
        outcome = Scheduler(session, pool, Report(), in_order=False, count_refused=True).run(work)
    finally:
        pool.close()
    if any(judging.records for judging in outcome):
        rendering.render_summary(session.folder)
    return outcome


def build_work(session: Session, work: Work, pool: Any) -> int:
    """--build-only: build every solution of `work` with `pool`, print one line each (built,
    or loaded from the cache, or why not), and return the exit status: failed if any did not
    build."""
    from harness import verdicts
    from harness.run.reporting import Report
    from harness.run.scheduler import Scheduler

    started = time.monotonic()
    jobs = getattr(pool, "build_jobs", None)
    at_once = (
        f"{jobs} at once" if isinstance(jobs, int) else "as many at once as the cluster allows"
    )
    print(f"build only: {sum(len(s) for _, s in work)} solution(s), {at_once}")
    try:
        built = Scheduler(session, pool, Report.serial(session.progress)).build(work)
    finally:
        pool.close()
    failed = 0
    for unit, ended in built:
        result = ended.judged
        builds = result.builds or ()
        # a CUDA solution built on a machine without a GPU (--compile-cuda) is built too
        if result.ok or (result.status == verdicts.NO_GPU and builds):
            done = ", ".join(b.name + (" cached" if b.cached else "") for b in builds)
            print(f"{unit.label}: built ({done or 'no extension'})")
        else:
            failed += 1
            print(f"{unit.label}: {result.status}: {result.detail}")
    seconds = time.monotonic() - started
    print(f"build only: {len(built) - failed} of {len(built)} built in {seconds:.0f} s")
    return EXIT_FAILED if failed else EXIT_OK


def run_work(
    session: Session,
    work: Work,
    pool: Any = None,
    sweep: bool = False,
    again: bool = False,
    unsolved: list[str] | None = None,
) -> int:
    """Judge `work` with `pool` (default: this host's, on the session's device), print the
    results, and return the exit status. A `sweep` shows one bar for the whole run and ends
    with its summary, which counts `unsolved` (problems given without a solution) too;
    `again` is --resume."""
    from harness.run import pool as local
    from harness.run.reporting import Report, SweepReport
    from harness.run.scheduler import Scheduler

    pool = pool or local.LocalPool([session.settings.device], local.build_jobs(None))
    report = SweepReport(len(pool.slots)) if sweep else Report.serial(session.progress)
    started = time.monotonic()
    scheduler = Scheduler(session, pool, report, again, in_order=not sweep, count_refused=sweep)
    try:
        outcome = scheduler.run(work)
    except KeyboardInterrupt:  # a sweep stopped midway still says how far it got, how fast
        if sweep:
            stopped_sweep(session, time.monotonic() - started, scheduler.wait.line())
        raise
    finally:
        pool.close()
    sweep_s = time.monotonic() - started if sweep else None
    return finish(session, outcome, sweep_s, unsolved or [], scheduler.wait.line())


def stopped_sweep(session: Session, seconds: float, first_wait: str | None) -> None:
    """The summary of a sweep interrupted after `seconds`, from what it recorded (nothing
    where it records nothing), and how soon its first judgement began."""
    from harness import record

    if session.recording and (session.folder / record.LOG_NAME).exists():
        mine = [r for r in record.read(session.folder) if r.run_id == session.run_id]
        print(f"stopped: {sweep_summary(mine, session.run_id, seconds)}", flush=True)
    if first_wait:
        print(first_wait, flush=True)


def finish(
    session: Session,
    outcome: list[Judging],
    sweep_s: float | None,
    unsolved: list[str],
    first_wait: str | None = None,
) -> int:
    """Print each problem's rows and the summary (a sweep's with `first_wait`: how soon its
    first judgement began); the exit status: EXIT_INPUT where a problem was refused, else
    EXIT_FAILED where a solution did not pass."""
    from harness.results import rendering
    from harness.run.session import passed

    code, recorded, records = EXIT_OK, False, []
    for judging in outcome:
        done = judging.records
        if judging.refused:  # one broken problem does not stop the others
            print(f"error: {judging.refused}", file=sys.stderr)
            code = EXIT_INPUT
        elif done:
            show_results(session, judging.source.name, done)
        records += done
        recorded = recorded or (session.recording and bool(done))
        if not all(passed(r) for r in done) and code == EXIT_OK:
            code = EXIT_FAILED
    if recorded:  # only a run that recorded something rewrites the summary
        written, records_there = rendering.render_summary(session.folder)
        print(f"summary across problems: {written}")
        warn_if_older(records_there, str(session.folder))
    if sweep_s is not None:
        print(sweep_summary(records, session.run_id, sweep_s, outcome, unsolved))
        if first_wait:
            print(first_wait)
    print(run_line(session.folder, session.run_id))
    return code


def sweep_summary(
    records: list[RunRecord],
    run_id: str,
    seconds: float,
    outcome: list[Judging] | None = None,
    unsolved: list[str] | None = None,
) -> str:
    """The sweep in a few lines: what it was given and what became of each problem (judged,
    weak, refused and why, without a solution), verdicts, geomean and fast_p of each
    problem's best solution (harness.results.summary; under --resume, earlier records count
    too), and the rate of this run alone: problems and solutions judged per hour."""
    from collections import Counter

    from harness.results import summary

    best = summary.best_per_problem(summary.summary_rows(records))
    scores = [row.score for row in best.values() if row and row.score is not None]
    geomean = summary.geomean(scores) if scores else None
    verdicts = ", ".join(f"{n} {s}" for s, n in Counter(r.status for r in records).most_common())
    fast = ", ".join(f"fast_{p:g} {summary.fast_p(best, p):.0%}" for p in (0.0, *summary.FAST_P))
    untimed = any(r.status == "ok" for r in records)  # ok without a score: --check-only
    now = [r for r in records if r.run_id == run_id]
    problems = {r.problem for r in records}
    if geomean:
        best_line = f"geomean {geomean:.2f}x over {len(scores)} problem(s); {fast}"
    else:  # nothing timed: no geomean, and fast_p would only say 0%
        best_line = "none timed (checked only)" if untimed else "none correct"
    lines = [
        f"sweep: {len(records)} solution(s) of {len(problems)} problem(s): {verdicts or 'none'}",
        *(accounting(records, outcome, unsolved or []) if outcome is not None else []),
        f"  best per problem: {best_line}",
    ]
    if len(now) < len(records):
        lines.append(f"  {len(records) - len(now)} solution(s) recorded earlier (--resume)")
    hours = seconds / 3600
    rate = (
        f"{len({r.problem for r in now}) / hours:.0f} problems/hour, "
        f"{len(now) / hours:.0f} solutions/hour"
        if hours > 0 and now
        else "nothing judged"
    )
    lines.append(f"  this run: {len(now)} solution(s) judged in {seconds:.0f} s wall, {rate}")
    split = time_split(now)
    if split:
        lines.append(f"  workers' time: {split}")
        lines.append(f"  per solution, median: {phase_medians(now)}")
    return "\n".join(lines)


def accounting(records: list[RunRecord], outcome: list[Judging], unsolved: list[str]) -> list[str]:
    """Lines that account for every problem the sweep was given: judged (and how many of those
    weak), refused (each with why), without a solution."""
    refused = [j for j in outcome if j.refused]
    weak = sorted({r.problem for r in records if r.weaknesses})
    given = len(outcome) + len(unsolved)
    lines = [
        f"  given {given} problem(s): {len(outcome) - len(refused)} judged ({len(weak)} weak, "
        f"their rows flagged), {len(refused)} refused, {len(unsolved)} without a solution"
    ]
    if weak:
        checks = {r.problem: r.weaknesses[0].check for r in records if r.weaknesses}
        lines.append("  weak: " + ", ".join(f"{name} ({checks[name]})" for name in weak))
    lines += [f"  refused: {j.source.name}: {j.refused}" for j in refused]
    if unsolved:
        lines.append("  without a solution: " + ", ".join(unsolved))
    return lines


def phase_medians(records: list[RunRecord]) -> str:
    """Each phase's median seconds per solution over the `records` that reached it."""
    phases = _spent([record.phase_s for record in records])
    return ", ".join(
        f"{name} {statistics.median(spent):.2f} s ({len(spent)})" for name, spent in phases.items()
    )


def _spent(seconds: list[dict[str, float] | None]) -> dict[str, list[float]]:
    """The seconds of each phase (or part) over many records' `phase_s` (or `parts_s`)."""
    by_name: dict[str, list[float]] = {}
    for spent in seconds:
        for name, taken in (spent or {}).items():
            by_name.setdefault(name, []).append(taken)
    return by_name


def time_split(records: list[RunRecord]) -> str:
    """Where the workers' seconds went over `records`: each phase (isolate), then each part of
    the check and time phases (harness.stats), largest first, and what no part covers."""
    phases = {n: sum(s) for n, s in _spent([record.phase_s for record in records]).items()}
    parts = {n: sum(s) for n, s in _spent([record.parts_s for record in records]).items()}
    if not phases:
        return ""
    text = ", ".join(f"{name} {s:.1f} s" for name, s in phases.items())
    if parts:
        rest = phases.get("check", 0.0) + phases.get("time", 0.0) - sum(parts.values())
        ranked = [*sorted(parts.items(), key=lambda item: -item[1]), ("elsewhere", rest)]
        text += "; of check and time: " + ", ".join(f"{n} {s:.1f} s" for n, s in ranked)
    return text


def show_results(session: Session, problem: str, done: list[RunRecord]) -> None:
    """This run's rows of the problem, compact (within 100 columns), and where the full table
    is; with --no-record, that nothing was written."""
    from harness.results import console

    if not session.recording:
        print(console.compact(problem, done, None))
        print(f"not recorded (--no-record): nothing written under {session.folder.parent}\n")
        return
    print(console.compact(problem, done, session.folder / f"{problem}.md") + "\n")


def untimed(records: list[RunRecord]) -> str:
    """Why a run's `records` have no timings to compare: checked only, no GPU, or none of
    them passed its checks."""
    from harness import verdicts

    if all(r.settings.checking.check_only for r in records):
        return "checked only, no timings to compare"
    if all(r.status == verdicts.NO_GPU for r in records):
        return "nothing timed: its CUDA solutions need a GPU"
    if not any(r.status == verdicts.OK for r in records):
        return "nothing timed: no solution passed its checks"
    return "nothing timed, no timings to compare"


def run_line(folder: Path, run_id: str) -> str:
    """The line that ends a run: its id, where its results are, and the --compare command that
    sets its timed rows beside the newest earlier timed run of one of its solutions, where
    there is one (a check-only run or replay has no rows to compare). The command runs as
    printed: no placeholder, and each folder quoted for the shell where it needs to be."""
    from harness import record
    from harness.settings import typed

    all_records = record.read(folder) if (folder / record.LOG_NAME).exists() else []
    this_run = [r for r in all_records if r.run_id == run_id]
    if not this_run:
        return f"run {run_id}: nothing recorded"
    ours = {(r.problem, r.solution_path) for r in this_run}
    shown = typed(folder)
    where = f"run {run_id}: results in {shown}/"
    if not any(r.benchmarks for r in this_run):
        return f"{where} ({untimed(this_run)})"
    earlier = [
        r.run_id
        for r in all_records
        if r.run_id != run_id and r.benchmarks and (r.problem, r.solution_path) in ours
    ]
    if not earlier:
        return f"{where} (the first timed run of these solutions here)"
    old, new = (shlex.quote(f"{shown}@{run}") for run in (earlier[-1], run_id))
    return f"{where} (compare with: python run.py --compare {old} {new})"


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
    from harness import record
    from harness.results import rendering

    folder = where.folder
    if not (folder / record.LOG_NAME).is_file():
        raise UserError(
            f"--render: no recorded runs in {where.shown} ({where.why}); {_others(folder)}"
        )
    print(f"rendering {where.shown} ({where.why})", flush=True)
    written, records = rendering.render_folder(folder)
    print(f"rendered {where.shown}: {_names(written)}")
    warn_if_older(records, where.shown)


def warn_if_older(records: list[RunRecord], shown: str) -> None:
    """One line where the rows that a folder's tables show (of `records`, its run log) were
    made by a harness older than the checkout's (harness.run.machine.older_commits): their
    numbers may not be today's. `shown`: the folder as the user named it."""
    from harness.results import summary
    from harness.run import machine

    latest = summary.latest_records(records)
    commits = {r.machine.commit or "unknown" for r in latest}
    found = machine.older_commits(commits, REPO)
    if found:
        last, older = found
        rows = sum(1 for r in latest if (r.machine.commit or "unknown") in older)
        named = ", ".join(c[:12] + ("-dirty" if c.endswith("-dirty") else "") for c in older[:3])
        more = f" and {len(older) - 3} more" if len(older) > 3 else ""
        print(
            f"warning: {rows} of the {len(latest)} solutions' latest rows in {shown} were made "
            f"at {named}{more}, older than this checkout's last change to harness/, "
            f"solutions/ or problems/ ({last}): run them again to refresh them",
            file=sys.stderr,
        )


def forget_solution(where: Chosen, problem_arg: str, solution: str) -> None:
    """Drop `solution`'s rows of the problem from the folder `where` names, and re-render it."""
    from harness import record
    from harness.results import rendering

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
        written = [*rendering.render_problem(folder, problem), rendering.render_summary(folder)[0]]
    except OSError as err:
        raise UserError(
            f"--forget: cannot write {where.shown} ({err.strerror or err}); fix its permissions"
        ) from err
    removed = [path for path in before if not path.exists()]
    done = f"rewrote: {_names(written)}" + (f"; removed: {_names(removed)}" if removed else "")
    print(f"forgot {solution} of {problem} in {where.shown}; {done}")


def _recorded(folder: Path, problem: str, solution: str) -> bool:
    """Whether `folder`'s tables show rows of `solution` for `problem` (without writing)."""
    from harness import record

    if not (folder / record.LOG_NAME).is_file():
        return False
    return bool(record.matching(record.read(folder), problem, solution))


def _folders(results_dir: Path) -> list[Path]:
    from harness import record

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
