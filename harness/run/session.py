"""Run every solution of a problem, each in its own worker, and record each result at once."""

from __future__ import annotations

import datetime
import os
import secrets
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from harness import files, status, toolchain
from harness.errors import UserError
from harness.loading import Problem, load_problem
from harness.measure import roofline
from harness.measure.timing import StopRule
from harness.measure.worker import Job
from harness.results import baselines, rendering, report
from harness.run import audit, isolate, machine, scan
from harness.run.discovery import ProblemSource, missing_model_new
from harness.run.progress import Progress

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Options:
    """How to run; the defaults here are the CLI's defaults (run.py shows them in -h)."""

    device: str = "cpu"
    trials: int = 5
    seed: int = 42
    secret: int | None = None  # None: a fresh random secret per run (harness.inputs.mixed_seed)
    audit: bool = True  # refuse a problem whose audit rejects it (harness.audit)
    rule: StopRule = field(default_factory=StopRule)
    graph: bool = False
    flush: str = "read"
    compile: bool = False
    baseline_cache: bool = True
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
        # Drawn here, told to workers only, recorded with the results once they are in.
        self.secret = options.secret if options.secret is not None else secrets.randbelow(2**48) + 1
        self.folder = options.results_dir / machine.slug(self.machine)
        self._ceiling: dict[str, Any] | None = None

    def ceiling(self) -> dict[str, Any] | None:
        """The GPU's copy bandwidth, from the folder's cache or measured now (None on a CPU)."""
        if self._ceiling is None and self.device.type == "cuda":
            self.progress.note("measuring the copy bandwidth of this GPU (cached afterwards)")
            self._ceiling = roofline.ceiling(self.folder, self.device, self.machine)
        return self._ceiling

    def run_problem(self, source: ProblemSource, solutions: list[Path]) -> list[dict[str, Any]]:
        """Check and time `solutions` of `source`; append each record; re-render the tables."""
        problem = load_problem(source.name, source.reference)  # a bad reference fails here, once
        self._audit(source, problem)
        done: list[dict[str, Any]] = []
        ceiling = self.ceiling()
        compiled = self._compile_baselines(source, problem) if self.options.compile else []
        try:
            for index, solution in enumerate(solutions, start=1):
                self.progress.start(index, len(solutions), f"{source.name}/{solution.stem}")
                record = self._run_one(source, solution, index, cases=len(problem.cases))
                record["ceiling"] = ceiling
                for bench in record.get("benchmarks", []):
                    baselines.attach(bench, compiled, self.run_id)
                files.append(self.folder, record)
                self.progress.finish(summary(record))
                done.append(record)
        finally:  # on Ctrl-C too: the tables show every result recorded so far
            if done:
                rendering.render_problem(self.folder, source.name)
        return done

    def _audit(self, source: ProblemSource, problem: Problem) -> None:
        """Refuse a problem that a zero, constant or memorised answer would pass."""
        if not self.options.audit:
            return
        import torch

        findings = audit.audit_problem(problem, torch.device(self.options.device))
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
            "time": _now(),
            "problem": source.name,
            "reference": _shown(source.reference),
            "solution": solution.stem,
            "solution_path": _shown(solution),
            "solution_hash": content,
            "log": _shown(log_path) if log_path.exists() else None,
            "warnings": scan.scan(solution) + result.pop("warnings", []),
            "cases": cases,
            "settings": {
                "device": self.options.device,
                "trials": self.options.trials,
                "seed": self.options.seed,
                "secret": self.secret,
                "rule": asdict(self.options.rule),
                "graph": self.options.graph,
                "flush": self.options.flush,
                "arch": self.arch,
            },
            "machine": self.machine,
            **result,
        }

    def _compile_baselines(self, source: ProblemSource, problem: Problem) -> list[dict[str, Any]]:
        """The problem's torch.compile baselines: cached ones, else measured now in a worker."""
        reference_hash = toolchain.source_hash(source.reference)
        context = {
            "problem": source.name,
            "reference_hash": reference_hash,
            "mode": "cuda_graph" if self.options.graph else "cuda_events",
            "flush": self.options.flush,
            "gpu": self.machine.get("gpu"),
            "torch": self.machine.get("torch"),
        }
        if self.device.type != "cuda":
            context["mode"] = "wall_clock"
        found = baselines.cached(self.folder, context) if self.options.baseline_cache else []
        if {b.name for b in problem.benchmarks} <= {e.get("name") for e in found}:
            self.progress.note(f"{source.name}: torch.compile baseline from {baselines.LOG_NAME}")
            return found
        self.progress.start(0, 0, f"{source.name}/torch.compile baseline")
        log_path = self.options.log_dir / self.run_id / f"00-{source.name}--compile.log"
        job = replace(
            self._job(source, source.reference, log_path, reference_hash),
            task="compile_baseline",
        )
        limits = isolate.Limits(self.options.build_timeout_s, self.options.timeout_s)
        result = isolate.run_isolated(job, limits, self.progress.event)
        self.progress.finish(f"{result['status']} {result.get('detail') or ''}".strip())
        if result["status"] != status.OK:
            return found
        run = {"run_id": self.run_id, "time": _now(), "driver": self.machine.get("driver")}
        baselines.store(self.folder, {**context, **run}, result["benchmarks"])
        return baselines.cached(self.folder, context)

    def _job(self, source: ProblemSource, solution: Path, log_path: Path, content: str) -> Job:
        o = self.options
        return Job(
            problem=source.name,
            reference=str(source.reference),
            solution=str(solution),
            device=o.device,
            trials=o.trials,
            seed=o.seed,
            rule=o.rule,
            graph=o.graph,
            flush=o.flush,
            cache_dir=str(o.cache_dir),
            arch=self.arch,
            log_path=str(log_path),
            content_hash=content,
            secret=self.secret,
            atol=o.atol,
            rtol=o.rtol,
        )


def summary(record: dict[str, Any]) -> str:
    """One line for the progress stream: the verdict and, when timed, the headline numbers."""
    line = record["status"]
    for bench in record.get("benchmarks", []):
        sol, ref = bench["solution"]["median_us"], bench["reference"]["median_us"]
        speedup = report.bench_speedup(bench)
        line += (
            f"; {report.bench_label(bench)}: {sol:.3g} us vs {ref:.3g} us "
            f"({speedup.value:.2f}x [{speedup.low:.2f}, {speedup.high:.2f}], "
            f"n={bench['solution']['count']})"
        )
    if record.get("detail"):
        line += f": {record['detail']}"
    return line


def passed(record: dict[str, Any]) -> bool:
    return record["status"] in status.PASSING


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _shown(path: Path) -> str:
    """A path relative to the repository where it lies inside it, else absolute."""
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return os.path.abspath(path)
