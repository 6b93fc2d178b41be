"""A problem is audited once, not once a run (harness.run.auditing): its answer is kept in the
build cache by the reference's sources and the harness's code, and a changed reference, a
failed audit or a failing reference is audited again."""

from __future__ import annotations

import io
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from harness import verdicts
from harness.job import Audited, Ended, Job, Judged
from harness.loading import load_problem
from harness.measure import audit
from harness.measure.audit import audit_each
from harness.record import Finding
from harness.run.auditing import AuditCache, Auditing
from harness.run.discovery import ProblemSource
from harness.run.progress import Progress
from harness.run.session import Session
from harness.settings import Places, Settings
from harness.toolchain import source_hash
from tests.conftest import FIXTURES

AUDIT = FIXTURES / "audit"


def _copy(tmp_path: Path, name: str) -> ProblemSource:
    folder = tmp_path / "problems"
    folder.mkdir(exist_ok=True)
    shutil.copy(AUDIT / f"{name}.py", folder / f"{name}.py")
    return ProblemSource(name, folder / f"{name}.py")


def _no_worker(job: Any) -> Ended:
    raise AssertionError("on a CPU the audit runs in the run's own process")


def test_on_a_cpu_a_problem_is_audited_once_and_again_when_its_reference_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(device="cpu", places=Places(tmp_path, tmp_path / "builds", tmp_path))
    source = _copy(tmp_path, "returns_zeros")
    audited: list[str] = []
    real = audit.audit_problem

    def counted(problem: Any, *args: Any, **kwargs: Any) -> list[Finding]:
        audited.append(problem.name)
        return real(problem, *args, **kwargs)

    monkeypatch.setattr(audit, "audit_problem", counted)

    def weaknesses() -> list[str]:
        session = Session(settings, Progress(io.StringIO()), recording=False)
        problem = load_problem(source.name, source.reference)
        return [f.check for f in session.auditing.check(source, problem, _no_worker)]

    assert weaknesses() == weaknesses() == ["zero_passes"]
    assert audited == ["returns_zeros"]  # the second run read the first one's answer
    assert list((tmp_path / "builds" / ".audits").glob("*.json"))
    source.reference.write_text(source.reference.read_text() + "\n# changed\n")
    assert weaknesses() == ["zero_passes"] and len(audited) == 2


def test_on_a_gpu_only_the_problems_not_audited_before_go_to_the_worker(tmp_path: Path) -> None:
    """The session's side on a GPU, the workers stood in for: the first run's one audit job
    answers both problems; the next run asks no worker and says that it did not."""
    settings = Settings(device="cuda:0", places=Places(tmp_path, tmp_path, tmp_path))
    sources = [_copy(tmp_path, name) for name in ("returns_zeros", "good_relu")]
    jobs: list[Any] = []

    def run_job(job: Any) -> Ended:
        jobs.append(job.sources)
        return Ended(Judged(verdicts.OK, audits=audit_each(job.sources, torch.device("cpu"))))

    def alone(source: ProblemSource, task: str, run: Any) -> Judged:
        raise AssertionError("every problem was answered by the one job")

    def auditing() -> tuple[Auditing, io.StringIO]:
        job = lambda source, task, label: Job(source.name, "", "", "", "", settings, task)  # noqa: E731
        kept = (
            AuditCache(tmp_path / ".audits", "here"),
            lambda s: source_hash(s.reference),
        )
        said = io.StringIO()
        return Auditing(settings, Progress(said), job, alone, kept), said

    first, _ = auditing()
    first.audit_all(sources, run_job)
    assert len(jobs) == 1 and len(jobs[0]) == 2
    second, said = auditing()
    second.audit_all(sources, run_job)
    assert len(jobs) == 1  # no worker this time
    assert "2 of 2 problem(s) audited before" in said.getvalue()
    problem = load_problem(sources[0].name, sources[0].reference)
    assert [f.check for f in second.check(sources[0], problem, run_job)] == ["zero_passes"]


def test_a_failed_audit_or_a_failing_reference_is_not_kept(tmp_path: Path) -> None:
    cache = AuditCache(tmp_path, "here")
    cache.put("failed", Audited(error="RuntimeError: the worker died"))
    refused = Finding(audit.REJECT, "error", None, "its reference raised: CUDA out of memory")
    cache.put("refused", Audited((refused,)))
    weak = Finding(audit.WEAK, "zero_passes", "default", "returning zeros passes")
    cache.put("weak", Audited((weak,)))
    assert cache.get("failed") is None and cache.get("refused") is None
    assert cache.get("weak") == Audited((weak,))
    assert AuditCache(tmp_path, "elsewhere").get("weak") is None  # another GPU, torch, ...


def test_an_unreadable_answer_is_audited_again(tmp_path: Path) -> None:
    cache = AuditCache(tmp_path, "here")
    cache.put("weak", Audited(()))
    (kept,) = tmp_path.glob("*.json")
    kept.write_text("{not json")
    assert cache.get("weak") is None
