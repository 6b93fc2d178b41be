"""Run every solution of a problem, each in its own worker, and record each result at once."""

from __future__ import annotations

import datetime
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import isolate, machine, records, report, status, toolchain
from harness.discovery import ProblemSource, missing_model_new
from harness.loading import load_problem
from harness.progress import Progress
from harness.worker import Job

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Options:
    """How to run; the defaults here are the CLI's defaults (run.py shows them in -h)."""

    device: str = "cpu"
    trials: int = 5
    seed: int = 42
    warmup: int = 10
    reps: int = 100
    timeout_s: float = 300.0
    build_timeout_s: float = 1800.0
    arch: str | None = None
    atol: float | None = None
    rtol: float | None = None
    results_dir: Path = REPO / "results"
    cache_dir: Path = REPO / ".cache" / "builds"
    log_dir: Path = REPO / "logs"


class Session:
    """One invocation of run.py: a run id, the machine, and where results go."""

    def __init__(self, options: Options, progress: Progress | None = None) -> None:
        import torch

        self.options = options
        self.progress = progress or Progress()
        self.device = torch.device(options.device)
        capability = (
            torch.cuda.get_device_capability(self.device) if self.device.type == "cuda" else None
        )
        self.arch = toolchain.arch_list(capability, options.arch)
        self.machine = machine.describe(self.device, REPO)
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
        self.run_id = f"{stamp}-{secrets.token_hex(3)}"
        self.folder = options.results_dir / machine.slug(self.machine)

    def run_problem(self, source: ProblemSource, solutions: list[Path]) -> list[dict[str, Any]]:
        """Check and time `solutions` of `source`; append each record; re-render the tables."""
        problem = load_problem(source.name, source.reference)  # a bad reference fails here, once
        done: list[dict[str, Any]] = []
        try:
            for index, solution in enumerate(solutions, start=1):
                self.progress.start(index, len(solutions), f"{source.name}/{solution.stem}")
                record = self._run_one(source, solution, index, cases=len(problem.cases))
                records.append(self.folder, record)
                self.progress.finish(summary(record))
                done.append(record)
        finally:  # on Ctrl-C too: the tables show every result recorded so far
            if done:
                report.write_tables(self.folder, source.name)
        return done

    def _run_one(
        self, source: ProblemSource, solution: Path, index: int, cases: int
    ) -> dict[str, Any]:
        # The index keeps two files of the same name (from different folders) apart.
        log_name = f"{index:02d}-{source.name}--{solution.stem}.log"
        log_path = self.options.log_dir / self.run_id / log_name
        content = toolchain.source_hash(solution)
        reason = missing_model_new(solution)
        if reason:
            result = isolate.failure(status.LOAD_ERROR, reason)
        else:
            job = self._job(source, solution, log_path, content)
            limits = isolate.Limits(self.options.build_timeout_s, self.options.timeout_s)
            result = isolate.run_isolated(job, limits, self.progress.event)
        return {
            "run_id": self.run_id,
            "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "problem": source.name,
            "reference": _shown(source.reference),
            "solution": solution.stem,
            "solution_path": _shown(solution),
            "solution_hash": content,
            "log": _shown(log_path) if log_path.exists() else None,
            "cases": cases,
            "settings": {
                "device": self.options.device,
                "trials": self.options.trials,
                "seed": self.options.seed,
                "warmup": self.options.warmup,
                "reps": self.options.reps,
                "arch": self.arch,
            },
            "machine": self.machine,
            **result,
        }

    def _job(self, source: ProblemSource, solution: Path, log_path: Path, content: str) -> Job:
        o = self.options
        return Job(
            problem=source.name,
            reference=str(source.reference),
            solution=str(solution),
            device=o.device,
            trials=o.trials,
            seed=o.seed,
            warmup=o.warmup,
            reps=o.reps,
            cache_dir=str(o.cache_dir),
            arch=self.arch,
            log_path=str(log_path),
            content_hash=content,
            atol=o.atol,
            rtol=o.rtol,
        )


def summary(record: dict[str, Any]) -> str:
    """One line for the progress stream: the verdict and, when timed, the headline numbers."""
    line = record["status"]
    for bench in record.get("benchmarks", []):
        sol, ref = bench["solution"]["median_us"], bench["reference"]["median_us"]
        line += f"; {report.bench_label(bench)}: {sol:.3g} us vs {ref:.3g} us ({ref / sol:.2f}x)"
    if record.get("detail"):
        line += f": {record['detail']}"
    return line


def passed(record: dict[str, Any]) -> bool:
    return record["status"] in status.PASSING


def _shown(path: Path) -> str:
    """A path relative to the repository where it lies inside it, else absolute."""
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return os.path.abspath(path)
