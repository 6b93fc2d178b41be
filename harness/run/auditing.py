"""The audit of a run's problems (harness.measure.audit), as the run uses it.

On a CPU the reference runs here; on a GPU in workers, so that run.py's process never touches
the GPU, and several problems in one worker (`audit_all`): a worker's start, CUDA's included,
costs seconds, and one worker a problem made a 21-problem sweep wait minutes before its first
solution. Problems are audited as their solutions come up for judging (`Preparing`), a batch
at a time, so a sweep's first judgement waits for a few audits, not for all of them. A problem
its batch's worker could not audit (it died, say) is audited alone when it is prepared.
Answers are kept across runs (`AuditCache`), so only problems not audited before
are audited. Warnings are said on the console; a rejection
is the run's refusal of the problem, with the command that lists every finding.

The audits of earlier runs, kept so that a problem is audited once, not once a run.

A problem's audit (harness.measure.audit) reads only its reference: its answer is kept in the
build cache, `<build cache>/.audits/<key>.json`, under a key made of the reference's sources
(toolchain.source_hash), every file of the harness's own code (a change to how it audits makes
new keys), torch's version, the device (the GPU's name, or "cpu"), the tolerance the run
overrides and its profile (--as, with its tolerance). Only answers are kept, never an audit
that failed to run. A sweep of problems audited before goes straight to judging once its
first build is done.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shlex
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, replace
from pathlib import Path

import torch

from harness.job import Audited, Ended, Job, Judged
from harness.loading import Problem, load_problem
from harness.measure import audit
from harness.measure.audit import REJECT
from harness.record import Finding
from harness.run import replay
from harness.run.discovery import ProblemSource
from harness.run.progress import Progress
from harness.settings import Settings
from harness.verdicts import ProblemRefused, UserError

RunJob = Callable[[Job], Ended]  # runs a job in a worker on one of the run's slots
ReferenceJob = Callable[[ProblemSource, str, str], Job]  # (source, task, log label) -> Job
ReferenceResult = Callable[[ProblemSource, str, RunJob], Judged]  # (source, task, run)
ReferenceHash = Callable[[ProblemSource], str]  # the reference's sources (toolchain.source_hash)
Prepare = Callable[[ProblemSource, RunJob], tuple[Problem, int]]  # Session.prepare
AUDIT_BATCH = 8  # problems audited beside those a judgement waits for, in the run's order


class Auditing:
    """The audits of one run: each problem's findings, fetched once (see the module doc)."""

    def __init__(
        self,
        settings: Settings,
        progress: Progress,
        reference_job: ReferenceJob,
        reference_result: ReferenceResult,
        kept: tuple[AuditCache, ReferenceHash] | None = None,
    ) -> None:
        """`kept`: the answers of earlier runs, and the digest they are kept by; None audits
        every problem."""
        self.settings = settings
        self.kept = kept
        self.device = torch.device(settings.device)
        self.progress = progress
        self.reference_job = reference_job
        self.reference_result = reference_result
        self.told_default_shapes = False  # the note on problems without CASES, said once
        self._audited: dict[str, Audited] = {}  # by problem: the worker's answer

    def audit_all(self, sources: Sequence[ProblemSource], run_job: RunJob) -> None:
        """On a GPU, audit every problem of `sources` in one worker (`run_job`), ahead of
        their `check`; where that worker fails, each is audited alone later."""
        if self.device.type == "cpu" or not self.settings.audit:
            return
        for source in sources:
            answer = self._kept(source)
            if answer is not None:
                self._audited[source.name] = answer
        left = [s for s in sources if s.name not in self._audited]
        if len(sources) > len(left):
            told = f"{len(sources) - len(left)} of {len(sources)} problem(s)"
            self.progress.note(f"audits: {told} audited before (kept in the build cache)")
        if len(left) < 2:  # one is audited alone, when it is prepared
            return
        job = self.reference_job(left[0], "audit", "audits")
        job = replace(job, sources=tuple((s.name, str(s.reference)) for s in left))
        result = run_job(job).judged
        if result.ok:  # a harness failure is never ok
            answers = result.audits or {}
            self._audited.update(answers)
            for source in left:
                self._keep(source, answers.get(source.name))

    def check(
        self, source: ProblemSource, problem: Problem, run_job: RunJob
    ) -> tuple[Finding, ...]:
        """The problem's weaknesses (a wrong solution could pass it: the run judges it and
        flags its rows), each said once on the console; a UserError refuses a problem whose
        reference fails, or under --strict-audit one that a trivial answer passes."""
        if not self.settings.audit:
            return ()
        findings = self.findings(source, problem, run_job)
        strict = self.settings.strict_audit
        refusals = [f for f in findings if audit.finding_refuses(f, strict)]
        if refusals:
            audit_it = shlex.join(
                ["python", "run.py", "--audit", "--problem", replay.problem_arg(source)]
            )
            why = "its reference fails" if refusals[0].level == audit.REJECT else "--strict-audit"
            raise UserError(
                f"problem {source.name!r} fails its audit ({refusals[0].check}, {why}): "
                f"{refusals[0].message} (all findings: {audit_it}; --no-audit runs it anyway)"
            )
        for finding in findings:
            if finding.level == audit.WEAK:
                self.progress.note(
                    f"{source.name}: weak problem ({finding.check}): {finding.message}; "
                    "judged, its rows flagged (--strict-audit refuses such a problem)"
                )
            elif finding.check == "one_shape" and len(problem.cases) == 1:  # it declares no CASES
                self._note_default_shapes_only()
            else:
                self.progress.note(f"{source.name}: audit warning: {finding.message}")
        return tuple(f for f in findings if f.level == audit.WEAK)

    def findings(self, source: ProblemSource, problem: Problem, run_job: RunJob) -> list[Finding]:
        """The audit's findings on `problem`: on a CPU here, on a GPU from `audit_all`'s
        worker or else a worker of its own (`run_job`)."""
        answer = self._audited.pop(source.name, None) or self._kept(source)
        if answer is None and self.device.type == "cpu":
            tolerance = self.settings.checking.tolerance
            answer = Audited(tuple(audit.audit_problem(problem, self.device, tolerance)))
            self._keep(source, answer)
        elif answer is None:
            answers = self.reference_result(source, "audit", run_job).audits or {}
            answer = answers.get(source.name, Audited(error="no answer from its worker"))
            self._keep(source, answer)
        if answer.error is not None:
            raise UserError(f"{source.name}: its audit failed: {answer.error}")
        return list(answer.findings)

    def _kept(self, source: ProblemSource) -> Audited | None:
        return self.kept[0].get(self.kept[1](source)) if self.kept else None

    def _keep(self, source: ProblemSource, answer: Audited | None) -> None:
        if self.kept and answer is not None:
            self.kept[0].put(self.kept[1](source), answer)

    def _note_default_shapes_only(self) -> None:
        """Said once a run, not per problem: a problem file without CASES (KernelBench's are
        such) has nothing its user can act on but that."""
        if not self.told_default_shapes:
            self.told_default_shapes = True
            self.progress.note(
                "audit note: a problem that declares no CASES (KernelBench's files) is checked "
                "on its default input shapes only, so a solution hard-coded to them would pass; "
                "add CASES to a problem file to check other sizes (said once a run)"
            )


class Preparing:
    """Each problem of a run prepared (loaded and audited: Session.prepare) when its first
    solution comes up for judging. The problem's audit goes to one worker (`audit_all`) with
    those of the problems of every solution ready to judge by then and of the next AUDIT_BATCH
    problems in the run's order, so the first judgement waits for a few audits, and a worker
    starts once a batch. What preparing refuses (a UserError) is kept as the problem's."""

    def __init__(self, auditing: Auditing, prepare: Prepare) -> None:
        self.auditing, self._prepare = auditing, prepare
        self.order: list[ProblemSource] = []  # the run's problems, in its order
        self.prepared: dict[str, tuple[Problem, int] | UserError] = {}
        self._asked: set[str] = set()  # problems whose audit was asked for
        self._lock = threading.Lock()

    def get(
        self, source: ProblemSource, run_job: RunJob, ready: Callable[[], Iterable[ProblemSource]]
    ) -> tuple[Problem, int] | UserError:
        """`source` prepared, once; `ready()`: the problems of the solutions ready to judge,
        asked only when a batch is audited."""
        with self._lock:
            if source.name not in self.prepared:
                if source.name not in self._asked:
                    self.auditing.audit_all(self._batch(source, ready()), run_job)
                try:
                    self.prepared[source.name] = self._prepare(source, run_job)
                except UserError as err:
                    self.prepared[source.name] = err
            return self.prepared[source.name]

    def refuse_early(self, source: ProblemSource) -> bool:
        """Whether `source`'s file is refused before anything of it is built: it does not load
        here (a syntax error, an import that raises, a name of the contract missing). The
        refusal is kept as the problem's, so that no build is wasted on its solutions."""
        with self._lock:
            if source.name not in self.prepared:
                try:
                    load_problem(source.name, source.reference)
                except UserError as err:
                    self.prepared[source.name] = ProblemRefused(str(err))
            return isinstance(self.prepared.get(source.name), UserError)

    def _batch(self, source: ProblemSource, ready: Iterable[ProblemSource]) -> list[ProblemSource]:
        """`source`, the ready problems and the next AUDIT_BATCH, none asked for before."""
        batch: dict[str, ProblemSource] = {}
        for candidate in [source, *ready]:
            if candidate.name not in self._asked:
                batch.setdefault(candidate.name, candidate)
        later = [s for s in self.order if s.name not in self._asked and s.name not in batch]
        batch.update((s.name, s) for s in later[:AUDIT_BATCH])
        self._asked.update(batch)
        return list(batch.values())


HARNESS = Path(__file__).resolve().parent.parent  # the package whose code makes the answers


class AuditCache:
    """Audit answers by key, in `folder` (see the module doc); `context` is what besides the
    reference the answer depends on here: torch, the device, the tolerance, the profile."""

    def __init__(self, folder: Path, context: str) -> None:
        self.folder = folder
        self.context = f"{context}|{harness_digest()}"

    def get(self, reference: str) -> Audited | None:
        """The answer kept for a reference of sources digest `reference`, or None."""
        try:
            kept = json.loads((self.folder / f"{self._key(reference)}.json").read_text())
            return Audited(tuple(Finding(**finding) for finding in kept["findings"]))
        except (OSError, ValueError, TypeError, KeyError):
            return None  # none kept, or unreadable: audited again

    def put(self, reference: str, answer: Audited) -> None:
        """Keep `answer` for the reference; not an audit that failed, nor one that found the
        reference failing (that may pass on another day: out of memory, say), and never the
        run's failure where the cache cannot be written."""
        if answer.error is not None or any(f.level == REJECT for f in answer.findings):
            return
        path = self.folder / f"{self._key(reference)}.json"
        text = json.dumps({"findings": [asdict(finding) for finding in answer.findings]})
        with contextlib.suppress(OSError):
            self.folder.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f"{path.name}.{os.getpid()}")
            partial.write_text(text)
            os.replace(partial, path)

    def _key(self, reference: str) -> str:
        return hashlib.sha256(f"{reference}|{self.context}".encode()).hexdigest()[:24]


@functools.cache
def harness_digest() -> str:
    """SHA-256 of every Python file of the harness package, read once a process."""
    digest = hashlib.sha256()
    for path in sorted(HARNESS.rglob("*.py")):
        digest.update(str(path.relative_to(HARNESS)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()
