"""Run every solution of a problem, each in its own worker, and record each result at once."""

from __future__ import annotations

import datetime
import os
import secrets
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness import codec, record, toolchain, verdicts
from harness.job import Ended, Job, Judged, failure
from harness.loading import Problem, load_problem
from harness.measure import hardware
from harness.measure.worker import cuda_not_asked
from harness.record import BenchRow, Ceiling, Finding, Machine, RunRecord
from harness.results import baselines, load, report
from harness.results.baselines import Baseline, BaselineKey, MeasuredBy
from harness.results.rendering import render_problems
from harness.run import discovery, machine, ncu, replay
from harness.run.auditing import AuditCache, Auditing, RunJob
from harness.run.discovery import ProblemSource, missing_model_new
from harness.run.progress import Progress
from harness.settings import REPO, Places, Settings, typed
from harness.verdicts import HarnessError, ProblemRefused, UserError


class Session:
    """One invocation of run.py: a run id, the machine, and where results go."""

    def __init__(
        self,
        settings: Settings,
        progress: Progress | None = None,
        recording: bool = True,
        described: Machine | None = None,
    ) -> None:
        """`settings` are resolved (device, arch and secret as used); the secret is told to
        workers only, and recorded with the results once they are in. Without `recording`
        (run.py --no-record) nothing is written under the results folder. `described` is the
        machine where the judging happens (harness.run.machine.describe), where it is not this
        process's (Ray)."""
        import torch

        self.settings = settings
        self.progress = progress or Progress()
        self.device = torch.device(settings.device)
        self.machine = described or machine.describe(self.device, REPO)
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
        self.run_id = f"{stamp}-{secrets.token_hex(3)}"
        self.folder = machine.results_folder(settings, self.machine)
        self.recording = recording
        self._ceiling: Ceiling | None = None
        self._reference_hashes: dict[Path, str] = {}
        self._earlier: dict[str, RunRecord] | None = None  # by content, read once (on a CPU)
        self._rows: dict[tuple[str, str], str] | None = None  # (problem, path): newest status
        self.weaknesses: dict[str, tuple[Finding, ...]] = {}  # by problem, from its audit
        # by problem, then by row name ("" for every row), why a row has no compile baseline
        self.uncompiled: dict[str, dict[str, str]] = {}
        self.created: list[str] = []  # a line for each folder of the run's it had to create
        self._check_places()
        checking = settings.checking
        on = self.machine.gpu or self.device.type
        context = (torch.__version__, on, checking.tolerance, checking.profile)
        kept = AuditCache(
            settings.places.build_dir / ".audits", repr((*context, checking.kernelbench_tolerance))
        )
        self.auditing = Auditing(
            settings,
            self.progress,
            self._reference_job,
            self._reference_result,
            (kept, self.reference_hash),
        )

    def _check_places(self) -> None:
        """Refuse, before any work, a results, log or build folder that cannot be created or
        written: a run would otherwise spend its time, then fail to keep what it measured."""
        places = self.settings.places
        folders = [("--log-dir", places.log_dir, places.log_dir)]
        folders.append(("--build-dir", places.build_dir, places.build_dir))
        if self.recording:
            folders.append(("--results-dir", places.results_dir, self.folder))
        for flag, given, folder in folders:
            missing = codec.first_missing(given)
            why = codec.unwritable(folder)
            if why:
                which = "it" if folder == given else str(folder)
                raise UserError(
                    f"{flag} {given}: cannot create or write {which}: {why}; "
                    f"pass {flag} a folder you can write"
                )
            named = given != getattr(Places(), flag[2:].replace("-", "_"))
            if missing is not None and named:  # the user's folder: say that it is new
                new = "it" if missing == given else f"{typed(missing)}, and the folders in it,"
                self.created.append(f"note: created {flag} {typed(given)} ({new} did not exist)")

    def ceiling(self, source: ProblemSource, run_job: RunJob) -> Ceiling | None:
        """The GPU's copy bandwidth, from the folder's cache or measured now in a worker by
        `run_job` (a slot's) with `source`'s reference loaded (None on a CPU, or where this
        process sees no GPU: a Ray driver's)."""
        import torch

        here = self.device.type == "cuda" and torch.cuda.is_available()
        if self._ceiling is None and here:

            def measure() -> Ceiling:
                self.progress.note("measuring the copy bandwidth of this GPU (cached afterwards)")
                copy = self._reference_result(source, "ceiling", run_job).ceiling
                if copy is None:
                    raise HarnessError(f"{source.name}: the ceiling job measured no ceiling")
                return copy

            self._ceiling = hardware.ceiling(
                self.folder, self.device, self.machine, store=self.recording, measure=measure
            )
        return self._ceiling

    def _reference_result(self, source: ProblemSource, task: str, run_job: RunJob) -> Judged:
        """The result of a job that runs `source`'s reference alone (harness.job.REFERENCE_TASKS);
        where it failed, a UserError for the audit (the problem is refused), else a
        HarnessError."""
        job = self._reference_job(source, task)
        result = harness_checked(run_job(job).judged, job)
        if not result.ok:  # the audit's failure is the problem's, else ours
            error = UserError if task == "audit" else HarnessError
            raise error(
                f"{source.name}: the {task} job failed: {result.status}: {result.detail} "
                f"(its log: {job.log_path})"
            )
        return result

    def _reference_job(self, source: ProblemSource, task: str, label: str | None = None) -> Job:
        log_name = f"00-{source.name}--{label or task}.log"
        log_path = self.settings.places.log_dir / self.run_id / log_name
        job = self._job(source, source.reference, log_path, self.reference_hash(source))
        return replace(job, task=task)

    def reference_hash(self, source: ProblemSource) -> str:
        """The reference's sources (harness.toolchain.source_hash), read once per run."""
        if source.reference not in self._reference_hashes:
            self._reference_hashes[source.reference] = toolchain.source_hash(source.reference)
        return self._reference_hashes[source.reference]

    def prepare(self, source: ProblemSource, run_job: RunJob) -> tuple[Problem, int]:
        """The problem, loaded and audited once (on a GPU in a worker, by `run_job`), and how
        many of its cases are checked; its audit's weaknesses are kept for its records. A
        problem of its own fault (harness.verdicts.ProblemRefused) or a --case it lacks
        (UserError) is refused."""
        try:
            problem = load_problem(source.name, source.reference)  # a bad file fails here, once
        except UserError as err:
            raise ProblemRefused(str(err)) from err
        cases = self._cases(source, problem)
        try:
            self.weaknesses[source.name] = self.auditing.check(source, problem, run_job)
        except UserError as err:
            raise ProblemRefused(str(err)) from err
        return problem, cases

    def _cases(self, source: ProblemSource, problem: Problem) -> int:
        """How many of the problem's cases are checked: all, or the one --case names (a
        UserError listing the cases when it names none of them)."""
        wanted = self.settings.checking.case
        if wanted is None:
            return len(problem.cases)
        names = [case.name for case in problem.cases]
        if wanted not in names:
            benchmarks = [bench.name for bench in problem.benchmarks]
            aside = " (it names a benchmark)" if wanted in benchmarks else ""
            raise UserError(
                f"--case {wanted!r}: problem {source.name!r} has no such case{aside}; its "
                f"cases: {', '.join(names)}"
            )
        return 1

    def keep(self, ran: RunRecord) -> None:
        """Append `ran` to the run log, at once; say so where it takes the place of the
        solution's passing row (the table shows each solution's newest record)."""
        if not self.recording:
            return
        if self._rows is None:  # each solution's newest status in the folder, read once
            log = self.folder / record.LOG_NAME
            earlier = record.read(self.folder) if log.exists() else []
            self._rows = {(r.problem, r.solution_path): r.status for r in earlier}
        before = self._rows.get((ran.problem, ran.solution_path))
        self._writing(record.append, self.folder, ran)
        self._rows[(ran.problem, ran.solution_path)] = ran.status
        if before == verdicts.OK and ran.status not in verdicts.PASSING:
            self.progress.note(
                f"note: {ran.problem}/{ran.solution}: this {ran.status} takes the place of its "
                f"earlier ok row in {ran.problem}.md (runs.jsonl keeps both; a passing run "
                "puts a row back)"
            )

    def render(self, problems: list[str]) -> None:
        """Re-render the problems' tables from the run log."""
        if self.recording and problems:
            self._writing(render_problems, self.folder, problems)

    def _writing(self, write: Any, *args: Any) -> Any:
        """`write(*args)`, a write under the results folder; the folder failing is the
        harness's failure (HarnessError), never the solution's."""
        try:
            return write(*args)
        except OSError as err:
            raise HarnessError(
                f"cannot write the results in {self.folder} ({err.strerror or err}); what was "
                "recorded before is kept: free or fix that folder, or pass --results-dir"
            ) from err

    def unit_job(self, source: ProblemSource, solution: Path, index: int, content: str) -> Job:
        """The job that judges `solution`, its log named by its index in the problem."""
        # The index keeps two files of the same name (from different folders) apart.
        log_name = f"{index:02d}-{source.name}--{solution.stem}.log"
        log_path = self.settings.places.log_dir / self.run_id / log_name
        return self._job(source, solution, log_path, content)

    def shortcut(self, solution: Path, content: str) -> Judged | None:
        """The result of a solution that needs no worker: a file without ModelNew, or a CUDA
        solution on the CPU that an earlier record says is `no_gpu` here; else None."""
        reason = missing_model_new(solution)
        if reason:
            return failure(verdicts.LOAD_ERROR, reason)
        return self._known_no_gpu(content)

    def record_for(
        self,
        source: ProblemSource,
        job: Job,
        ended: Ended,
        cases: int,
        compiled: list[Baseline],
    ) -> RunRecord:
        """The record of a judged job, made from how it ended: the result's own fields
        (CARRIED) as they are, each benchmark row with its torch.compile baseline from
        `compiled` where one matches, and the machine (with its load) where the job ran."""
        result = ended.judged
        solution, log_path = Path(job.solution), Path(job.log_path)
        measured = list(result.benchmarks)
        witnessed: list[str] = []
        if self.settings.ncu and result.ok and measured:
            device = result.device or job.settings.device
            measured, witnessed = self._witness(job, device, measured)
        versus = [baselines.versus(row, compiled, self.run_id) for row in measured]
        untimed = self.uncompiled.get(source.name, {})
        if untimed and self.settings.timing.compile:  # the column's blank says why
            measured = [
                row if found else _noted(row, untimed.get(row.name, untimed.get("")))
                for row, (found, _) in zip(measured, versus, strict=True)
            ]
        return RunRecord(
            **{name: getattr(result, name) for name in CARRIED},
            run_id=self.run_id,
            time=_now(),
            problem=source.name,
            reference=_shown(source.reference),
            solution=solution.stem,
            solution_path=_shown(solution),
            solution_hash=job.content_hash,
            log=_shown(log_path) if log_path.exists() else None,
            cases=cases,
            settings=job.settings,
            machine=ended.machine or machine.loaded(self.machine, self.device),
            benchmarks=tuple(
                replace(row, compile=baseline, vs_compile=speedup)
                for row, (baseline, speedup) in zip(measured, versus, strict=True)
            ),
            warnings=(*discovery.scan(solution), *result.warnings, *witnessed),
            ceiling=self._ceiling,
            reference_hash=self.reference_hash(source),
            phase_s=ended.phase_s,
            weaknesses=self.weaknesses.get(source.name, ()),
        )

    def announce(self, ran: RunRecord, source: ProblemSource, solution: Path, ended: Ended) -> str:
        """The replay command for a failed solution, or ''."""
        replayed = replay.command(ran, source, solution, ended.phase, ended.case, self.recording)
        return replayed or ""

    def _witness(
        self, job: Job, device: str, rows: list[BenchRow]
    ) -> tuple[list[BenchRow], list[str]]:
        """--ncu: `rows` with what Nsight Compute counted for one call each (harness.run.ncu)."""
        spec = replace(
            job,
            reference=str(Path(job.reference).resolve()),
            solution=str(Path(job.solution).resolve()),
            log_path="",
            settings=self.settings,
        )
        log = Path(job.log_path)
        return ncu.witness_rows(self.settings, device, spec, rows, log, self.progress.note)

    def _known_no_gpu(self, content: str) -> Judged | None:
        """A CUDA solution on the CPU, without a worker (about 3 s saved), where an earlier
        record of the same content says it is `no_gpu` here: not compiled, or, with
        --compile-cuda, compiled for the same target by that run (its build is cached)."""
        if self.device.type != "cpu":
            return None
        if self._earlier is None:  # the log as the run began: its newest record of each content
            log = self.folder / record.LOG_NAME
            earlier = record.read(self.folder) if log.exists() else []
            self._earlier = {r.solution_hash: r for r in earlier}
        last = self._earlier.get(content)
        if last is None or last.status != verdicts.NO_GPU:
            return None
        skipped = cuda_not_asked(self.device, self.settings)
        compiled = [b.name for b in last.builds or () if b.cuda]
        if skipped and (compiled or last.detail.startswith("not compiled: ")):
            return failure(verdicts.NO_GPU, f"not compiled: {skipped}")
        if compiled and last.settings.arch == self.settings.arch:
            names = ", ".join(compiled)
            detail = f"{names} compiled by run {last.run_id}; not run: no CUDA device"
            return replace(failure(verdicts.NO_GPU, detail), builds=last.builds)
        return None

    def compile_baselines(
        self, source: ProblemSource, problem: Problem, run_job: RunJob
    ) -> list[Baseline]:
        """The problem's torch.compile baselines: cached ones, else measured now by `run_job`
        (a worker on a slot's device)."""
        timing = self.settings.timing
        key = BaselineKey(
            problem=source.name,
            reference_hash=self.reference_hash(source),
            mode=timing.mode(self.device.type),
            flush=timing.flush,
            gpu=self.machine.gpu,
            torch=self.machine.torch,
        )
        found = baselines.cached(self.folder, key) if timing.baseline_cache else []
        if {b.name for b in problem.benchmarks} <= {e.row.name for e in found}:
            self.progress.note(f"{source.name}: torch.compile baseline from {baselines.LOG_NAME}")
            return found
        self.progress.note(f"{source.name}: timing the torch.compile baseline")
        job = self._reference_job(source, "compile_baseline", "compile")
        result = harness_checked(run_job(job).judged, job)
        verdict = f"{result.status}: {result.detail}" if result.detail else str(result.status)
        self.progress.note(f"{source.name}: torch.compile baseline: {verdict}")
        if not result.ok:
            self.uncompiled[source.name] = {"": verdict}
            return found
        for name, why in (result.compile_untimed or {}).items():
            self.progress.note(f"{source.name}/{name}: no torch.compile baseline: {why}")
        self.uncompiled[source.name] = dict(result.compile_untimed or {})
        by = MeasuredBy(self.run_id, _now(), self.machine.driver)
        measured = [Baseline(key, by, row) for row in result.compile_rows]
        if not self.recording:  # used by this run, kept by none
            return [*found, *measured]
        self._writing(baselines.store, self.folder, measured)
        return baselines.cached(self.folder, key)

    def _job(self, source: ProblemSource, solution: Path, log_path: Path, content: str) -> Job:
        return Job(
            problem=source.name,
            reference=str(source.reference),
            solution=str(solution),
            log_path=str(log_path),
            content_hash=content,
            settings=self.settings,
        )


def harness_checked(result: Judged, job: Job) -> Judged:
    """`result`, unless the harness failed the job (harness.job.harness_failure):
    then a HarnessError, so that no verdict is recorded against the solution."""
    if not result.harness_error:
        return result
    log = Path(job.log_path)
    where = f" (its log: {_shown(log)})" if log.exists() else ""
    raise HarnessError(
        f"{job.problem}/{Path(job.solution).stem}: {result.detail}{where}; the run stops "
        "here and records no verdict on the solution; what was recorded before is kept"
    )


# The fields a run's record takes from the job's result as they are (RunRecord's of the same name)
CARRIED = (
    "status",
    "detail",
    "checks",
    "device",
    "reason",
    "builds",
    "build_s",
    "own_share",
    "reference_share",
    "parts_s",
)
NOTE_CHARS = 180  # of a failed compile baseline's verdict, in the note of each row it leaves blank


def summary(ran: RunRecord) -> str:
    """One line for the progress stream: the verdict and, when timed, the headline numbers."""
    line = ran.status
    busy = load.columns(ran)
    for bench in ran.benchmarks:
        sol, ref = bench.solution.median_us, bench.reference.median_us
        speedup = report.bench_speedup(bench)
        line += (
            f"; {report.bench_label(bench)}: solution {report.format_us(sol)} us vs eager "
            f"{report.format_us(ref)} us ({speedup.value:.2f}x [{speedup.low:.2f}, "
            f"{speedup.high:.2f}], n={bench.solution.count})"
        )
        for flag in load.flags(busy, bench.others_cpu_share):
            line += f", {flag}"
    if ran.detail:
        line += f": {ran.detail}"
    return line


def passed(ran: RunRecord) -> bool:
    return ran.status in verdicts.PASSING


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _shown(path: Path) -> str:
    """A path relative to the repository where it lies inside it, else absolute."""
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return os.path.abspath(path)


def _noted(row: BenchRow, why: str | None) -> BenchRow:
    """`row` with "no torch.compile baseline: `why`" added to its note, where there is a why."""
    if why is None:
        return row
    said = f"no torch.compile baseline: {why[:NOTE_CHARS]}"
    return replace(row, note="; ".join(filter(None, (row.note, said))))
