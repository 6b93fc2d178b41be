"""Run every solution of a problem, each in its own worker, and record each result at once."""

from __future__ import annotations

import datetime
import os
import secrets
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness import files, record, status, toolchain
from harness.errors import HarnessError, UserError
from harness.loading import Problem, load_problem
from harness.measure import roofline
from harness.measure.worker import Job, cuda_not_asked
from harness.record import BenchRow, Ceiling, Machine, RunRecord
from harness.results import baselines, rendering, report
from harness.run import audit, isolate, machine, ncu, plants, replay, scan
from harness.run.discovery import ProblemSource, missing_model_new
from harness.run.progress import Progress
from harness.settings import REPO, Settings


class Session:
    """One invocation of run.py: a run id, the machine, and where results go."""

    def __init__(
        self, settings: Settings, progress: Progress | None = None, recording: bool = True
    ) -> None:
        """`settings` are resolved (device, arch and secret as used); the secret is told to
        workers only, and recorded with the results once they are in. Without `recording`
        (run.py --no-record) nothing is written under the results folder."""
        import torch

        self.settings = settings
        self.progress = progress or Progress()
        self.device = torch.device(settings.device)
        self.machine = machine.describe(self.device, REPO)
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
        self.run_id = f"{stamp}-{secrets.token_hex(3)}"
        self.folder = settings.places.results_dir / machine.slug(self.machine)
        self.recording = recording
        self._ceiling: dict[str, Any] | None = None
        self._earlier: dict[str, RunRecord] | None = None  # by content, read once (on a CPU)
        self._check_places()

    def _check_places(self) -> None:
        """Refuse, before any work, a results, log or build folder that cannot be created or
        written: a run would otherwise spend its time, then fail to keep what it measured."""
        places = self.settings.places
        folders = [("--log-dir", places.log_dir, places.log_dir)]
        folders.append(("--build-dir", places.build_dir, places.build_dir))
        if self.recording:
            folders.append(("--results-dir", places.results_dir, self.folder))
        for flag, given, folder in folders:
            why = files.unwritable(folder)
            if why:
                which = "it" if folder == given else str(folder)
                raise UserError(
                    f"{flag} {given}: cannot create or write {which}: {why}; "
                    f"pass {flag} a folder you can write"
                )

    def ceiling(self) -> dict[str, Any] | None:
        """The GPU's copy bandwidth, from the folder's cache or measured now (None on a CPU)."""
        if self._ceiling is None and self.device.type == "cuda":
            self.progress.note("measuring the copy bandwidth of this GPU (cached afterwards)")
            self._ceiling = roofline.ceiling(
                self.folder, self.device, self.machine, store=self.recording
            )
        return self._ceiling

    def run_problem(self, source: ProblemSource, solutions: list[Path]) -> list[RunRecord]:
        """Check and time `solutions` of `source`; append each record; re-render the tables."""
        problem = load_problem(source.name, source.reference)  # a bad reference fails here, once
        cases = self._cases(source, problem)
        self._audit(source, problem)
        done: list[RunRecord] = []
        measured = self.ceiling()
        ceiling = Ceiling.from_dict(measured) if measured else None
        compiled = self._compile_baselines(source, problem) if self.settings.timing.compile else []
        try:
            for index, solution in enumerate(solutions, start=1):
                self.progress.start(index, len(solutions), f"{source.name}/{solution.stem}")
                ran, at = self._run_one(source, solution, index, cases, ceiling, compiled)
                self._record(ran)
                self.progress.finish(summary(ran))
                again = replay.command(ran, source, solution, at.get("phase"), at.get("case"))
                if again:
                    self.progress.note(f"  replay: {again}")
                done.append(ran)
        finally:  # on Ctrl-C too: the tables show every result recorded so far
            if done and self.recording:
                self._writing(rendering.render_problem, self.folder, source.name)
        return done

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

    def _record(self, ran: RunRecord) -> None:
        if self.recording:
            self._writing(record.append, self.folder, ran)

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

    def _audit(self, source: ProblemSource, problem: Problem) -> None:
        """Refuse a problem that a zero, constant or memorised answer would pass."""
        if not self.settings.audit:
            return
        findings = audit.audit_problem(problem, self.device, self.settings.checking.tolerance)
        for finding in findings:
            if finding.level == audit.WARN:
                self.progress.note(f"{source.name}: audit warning: {finding.message}")
        rejects = [f for f in findings if f.level == audit.REJECT]
        if rejects:
            raise UserError(
                f"problem {source.name!r} fails its audit ({rejects[0].check}): "
                f"{rejects[0].message} (all findings: run.py --audit --problem {source.name}; "
                "--no-audit runs it anyway)"
            )

    def _run_one(
        self,
        source: ProblemSource,
        solution: Path,
        index: int,
        cases: int,
        ceiling: Ceiling | None,
        compiled: list[dict[str, Any]],
    ) -> tuple[RunRecord, dict[str, Any]]:
        """Run `solution` in a worker and build its record, each benchmark row with its
        torch.compile baseline from `compiled` where one matches, and the machine's load as
        the run began; with the record, where the worker ended (its `phase` and `case`,
        harness.run.isolate)."""
        busy = machine.load(self.device)
        # The index keeps two files of the same name (from different folders) apart.
        log_name = f"{index:02d}-{source.name}--{solution.stem}.log"
        log_path = self.settings.places.log_dir / self.run_id / log_name
        content = toolchain.source_hash(solution)
        reason = missing_model_new(solution)
        if reason:
            result = isolate.failure(status.LOAD_ERROR, reason)
        elif known := self._known_no_gpu(content):
            result = known
        else:
            job = self._job(source, solution, log_path, content)
            result = self._run_job(job, [solution.parent, source.reference.parent])
        measured = [BenchRow.from_dict(bench) for bench in result["benchmarks"]]
        witnessed: list[str] = []
        if self.settings.ncu and result["status"] == status.OK and measured:
            device = result.get("device") or self.settings.device
            measured, witnessed = self._witness(job, device, measured)
        versus = [baselines.versus(row, compiled, self.run_id) for row in measured]
        ran = RunRecord(
            run_id=self.run_id,
            time=_now(),
            problem=source.name,
            reference=_shown(source.reference),
            solution=solution.stem,
            solution_path=_shown(solution),
            solution_hash=content,
            log=_shown(log_path) if log_path.exists() else None,
            cases=cases,
            settings=self.settings,
            machine=Machine.from_dict({**self.machine, **busy}),
            status=result["status"],
            detail=result["detail"],
            checks=result["checks"],
            benchmarks=tuple(
                replace(row, compile=baseline, vs_compile=speedup)
                for row, (baseline, speedup) in zip(measured, versus, strict=True)
            ),
            warnings=tuple(scan.scan(solution) + result.get("warnings", []) + witnessed),
            ceiling=ceiling,
            **record.reported(result),
        )
        return ran, {"phase": result.get("phase"), "case": result.get("case")}

    def _witness(
        self, job: Job, device: str, rows: list[BenchRow]
    ) -> tuple[list[BenchRow], list[str]]:
        """--ncu: `rows` with what Nsight Compute counted for one call each (harness.run.ncu)."""
        spec = {
            "problem": job.problem,
            "reference": str(Path(job.reference).resolve()),
            "solution": str(Path(job.solution).resolve()),
            "content_hash": job.content_hash,
        }
        log = Path(job.log_path)
        return ncu.witness_rows(self.settings, device, spec, rows, log, self.progress.note)

    def _known_no_gpu(self, content: str) -> dict[str, Any] | None:
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
        if last is None or last.status != status.NO_GPU:
            return None
        skipped = cuda_not_asked(self.device, self.settings)
        compiled = [b.name for b in last.builds or () if b.cuda]
        if skipped and (compiled or last.detail.startswith("not compiled: ")):
            return isolate.failure(status.NO_GPU, f"not compiled: {skipped}")
        if compiled and last.settings.arch == self.settings.arch:
            names = ", ".join(compiled)
            detail = f"{names} compiled by run {last.run_id}; not run: no CUDA device"
            return {**isolate.failure(status.NO_GPU, detail), "builds": last.to_dict()["builds"]}
        return None

    def _run_job(self, job: Job, folders: list[Path]) -> dict[str, Any]:
        """Run `job` in a worker; a module it planted where Python imports from is removed, and
        rejects it (harness.run.plants), however the job ended."""
        watched = plants.ImportPath(folders)
        result = isolate.run_isolated(job, self.progress.event)
        planted = watched.remove_planted()
        result = harness_checked(result, job)
        if planted:
            result = {**result, **plants.rejection(planted), "benchmarks": []}
        return result

    def _compile_baselines(self, source: ProblemSource, problem: Problem) -> list[dict[str, Any]]:
        """The problem's torch.compile baselines: cached ones, else measured now in a worker."""
        reference_hash = toolchain.source_hash(source.reference)
        timing = self.settings.timing
        context = {
            "problem": source.name,
            "reference_hash": reference_hash,
            "mode": timing.mode(self.device.type),
            "flush": timing.flush,
            "gpu": self.machine.get("gpu"),
            "torch": self.machine.get("torch"),
        }
        found = baselines.cached(self.folder, context) if timing.baseline_cache else []
        if {b.name for b in problem.benchmarks} <= {e.get("name") for e in found}:
            self.progress.note(f"{source.name}: torch.compile baseline from {baselines.LOG_NAME}")
            return found
        self.progress.start(0, 0, f"{source.name}/torch.compile baseline")
        log_path = self.settings.places.log_dir / self.run_id / f"00-{source.name}--compile.log"
        job = replace(
            self._job(source, source.reference, log_path, reference_hash),
            task="compile_baseline",
        )
        result = harness_checked(isolate.run_isolated(job, self.progress.event), job)
        self.progress.finish(f"{result['status']} {result.get('detail') or ''}".strip())
        if result["status"] != status.OK:
            return found
        run = {"run_id": self.run_id, "time": _now(), "driver": self.machine.get("driver")}
        entries = [{**context, **run, **row} for row in result["benchmarks"]]
        if not self.recording:  # used by this run, kept by none
            return [*found, *entries]
        self._writing(baselines.store, self.folder, {**context, **run}, result["benchmarks"])
        return baselines.cached(self.folder, context)

    def _job(self, source: ProblemSource, solution: Path, log_path: Path, content: str) -> Job:
        return Job(
            problem=source.name,
            reference=str(source.reference),
            solution=str(solution),
            log_path=str(log_path),
            content_hash=content,
            settings=self.settings,
        )


def harness_checked(result: dict[str, Any], job: Job) -> dict[str, Any]:
    """`result`, unless the harness failed the job (harness.measure.worker.harness_failure):
    then a HarnessError, so that no verdict is recorded against the solution."""
    if not result.get("harness_error"):
        return result
    log = Path(job.log_path)
    where = f" (its log: {_shown(log)})" if log.exists() else ""
    raise HarnessError(
        f"{job.problem}/{Path(job.solution).stem}: {result['detail']}{where}; the run stops "
        "here and records no verdict on the solution; what was recorded before is kept"
    )


def summary(ran: RunRecord) -> str:
    """One line for the progress stream: the verdict and, when timed, the headline numbers."""
    line = ran.status
    for bench in ran.benchmarks:
        sol, ref = bench.solution.median_us, bench.reference.median_us
        speedup = report.bench_speedup(bench)
        line += (
            f"; {report.bench_label(bench)}: solution {report.format_us(sol)} us vs eager "
            f"{report.format_us(ref)} us ({speedup.value:.2f}x [{speedup.low:.2f}, "
            f"{speedup.high:.2f}], n={bench.solution.count})"
        )
    if ran.detail:
        line += f": {ran.detail}"
    return line


def passed(ran: RunRecord) -> bool:
    return ran.status in status.PASSING


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _shown(path: Path) -> str:
    """A path relative to the repository where it lies inside it, else absolute."""
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return os.path.abspath(path)
