"""The harness from Python: judge a solution, or a thousand, and get typed results back.

    from harness.run.evaluator import Evaluator
    result = Evaluator(device="cpu").evaluate("smooth_l1", "my_smooth_l1.py")
    print(result.status, result.speedup)

A problem is a shipped problem's name, a reference file's path (a KernelBench or GPUCodeForces
file) or a reference's source text (`Source`); a solution is a file's path or its source text
(`Source`). The settings are run.py's flags as keyword arguments (`max_samples=20` for
--max-samples 20, `compile=True` for --compile), checked as run.py checks them. Judging is a
run.py run: the same scheduler, pool, sandbox and records, each result appended to the results
folder's run log and its tables re-rendered. `evaluate_many` judges a batch as one sweep (builds
in parallel, every GPU --gpus names); `submit` returns a future, and submissions made while a
batch is judged are judged together as the next one.

Source text is written to `staging` (a folder of its own, by default submitted/ in the
repository, ignored by git) under a name made of its content, so a record's solution path and
its replay command keep working after the call.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import re
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import verdicts
from harness.codec import JsonObject
from harness.record import BenchRow, RunRecord
from harness.settings import REPO, Settings
from harness.stats import Interval
from harness.verdicts import UserError

STAGING = REPO / "submitted"
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
PLACEHOLDER_PROBLEM = "given-per-call"  # parse_args needs a problem; each call names its own


@dataclass(frozen=True)
class Source:
    """A file's text, given instead of its path; `name` becomes the file's stem (the record's
    solution name, or the problem's name), by default one made of the text's digest."""

    text: str
    name: str | None = None


Given = str | Path | Source


@dataclass(frozen=True)
class Evaluation:
    """One solution's verdict on one problem, and its record.

    `speedup` is the geometric mean over the timed shapes of the speedup over eager PyTorch
    (None unless `ok` and timed); `speedups` each shape's, with its 95% interval; `sol_score`
    the geometric mean of the speed-of-light scores (None on a CPU, or where a shape lacks
    one). `record` is what the results folder's run log holds (None where the problem was
    refused before any solution ran: `detail` then says why)."""

    problem: str
    solution: str
    status: str
    detail: str
    speedup: float | None
    speedups: tuple[Interval, ...]
    sol_score: float | None
    rows: tuple[BenchRow, ...]
    record: RunRecord | None

    @property
    def ok(self) -> bool:
        """Correct, and timed where timing was asked for."""
        return self.status == verdicts.OK


class Evaluator:
    """Judges solutions as run.py does, with the settings given once (the module doc)."""

    _judging = threading.Lock()  # one batch at a time in a process: the sandbox is its own

    def __init__(
        self,
        staging: Path | None = None,
        quiet: bool = True,
        args: argparse.Namespace | None = None,
        **flags: Any,
    ) -> None:
        """`flags`: run.py's settings flags by their names (`device="cpu"`, `trials=3`,
        `sandbox="required"`, `results_dir="..."`, `gpus="all"`, `build_jobs=8`); a bad one is
        a UserError saying why. `args`: run.py's parsed flags instead (the service's). `quiet`
        keeps the progress lines off stderr."""
        self.args = args if args is not None else parsed_flags(flags)
        self.staging = (staging or STAGING).resolve()
        self.quiet = quiet
        self._waiting: list[tuple[Given, Given, Future[Evaluation]]] = []
        self._lock = threading.Lock()
        self._worker: threading.Thread | None = None

    @property
    def settings(self) -> Settings:
        """The settings a batch is judged with (a fresh secret each batch, as each run's)."""
        from harness.run.flags import settings_for

        return settings_for(self.args, None, None)

    def evaluate(self, problem: Given, solution: Given) -> Evaluation:
        """Judge `solution` on `problem` (the module doc); its verdict and record. A problem
        that cannot be found or a file that cannot be a solution raises UserError."""
        staged = (self._problem(problem), self._solution(solution))
        return self._judged([staged])[0]

    def evaluate_many(self, pairs: list[tuple[Given, Given]]) -> list[Evaluation]:
        """Judge every (problem, solution) pair as one sweep; the results in their order. A
        pair that cannot be judged comes back without a record: `problem_error` where the
        problem cannot be found or used, `load_error` where the file cannot be a solution."""
        staged: list[tuple[Any, Path] | Evaluation] = []
        for problem, solution in pairs:
            try:
                source = self._problem(problem)
            except UserError as err:
                staged.append(unjudged(str(problem), str(solution), verdicts.PROBLEM_ERROR, err))
                continue
            try:
                staged.append((source, self._solution(solution)))
            except UserError as err:
                staged.append(unjudged(source.name, str(solution), verdicts.LOAD_ERROR, err))
        judged = iter(self._judged([s for s in staged if not isinstance(s, Evaluation)]))
        return [s if isinstance(s, Evaluation) else next(judged) for s in staged]

    def _judged(self, staged: list[tuple[Any, Path]]) -> list[Evaluation]:
        if not staged:
            return []
        with Evaluator._judging:
            judged = self._judge(staged)
        return [judged[(source.name, path)] for source, path in staged]

    def submit(self, problem: Given, solution: Given) -> Future[Evaluation]:
        """`evaluate` in the background: the future's result is the Evaluation (or the
        UserError that refused it); what is submitted while a batch runs forms the next."""
        future: Future[Evaluation] = Future()
        with self._lock:
            self._waiting.append((problem, solution, future))
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._drain, daemon=True)
                self._worker.start()
        return future

    def _drain(self) -> None:
        while True:
            with self._lock:
                batch, self._waiting = self._waiting, []
                if not batch:
                    self._worker = None
                    return
            try:
                results = self.evaluate_many([(p, s) for p, s, _ in batch])
            except Exception as err:  # each future carries it
                for _, _, future in batch:
                    future.set_exception(err)
                continue
            for (_, _, future), result in zip(batch, results, strict=True):
                future.set_result(result)

    def _problem(self, problem: Given) -> Any:
        from harness.run.discovery import ProblemSource, resolve_problem
        from harness.run.driving import PROBLEMS_DIR, SOLUTIONS_DIR

        if isinstance(problem, Source):
            path = self._stage(problem, "problems")
            return ProblemSource(path.stem, path)
        found = resolve_problem(str(problem), PROBLEMS_DIR, SOLUTIONS_DIR)
        return ProblemSource(found.name, found.reference)

    def _solution(self, solution: Given) -> Path:
        from harness.run.discovery import missing_model_new

        path = self._stage(solution, "solutions") if isinstance(solution, Source) else None
        path = path or Path(solution).expanduser()  # type: ignore[arg-type]
        if not path.is_file():
            raise UserError(f"solution {solution}: no such file; pass a path or a Source")
        reason = missing_model_new(path)
        if reason:
            raise UserError(f"solution {path}: {reason}")
        return path.resolve()

    def _stage(self, given: Source, kind: str) -> Path:
        """`given`'s text as a file under staging/`kind`/, named by `given.name` or its
        digest (a file of that name and other text is not overwritten: the digest is)."""
        digest = hashlib.sha256(given.text.encode()).hexdigest()[:12]
        name = given.name or f"{kind[:-1]}_{digest}"
        if not NAME.fullmatch(name):
            raise UserError(
                f"name {name!r}: use letters, digits and _ (a Python identifier, 64 at most)"
            )
        folder = self.staging / kind / digest
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{name}.py"
        if not path.exists():
            path.write_text(given.text, encoding="utf-8")
        return path

    def _judge(self, staged: list[tuple[Any, Path]]) -> dict[tuple[str, Path], Evaluation]:
        """Judge `staged` as one run (driving.judge_work); each pair's Evaluation."""
        from harness.run.driving import judge_work

        work: dict[str, tuple[Any, list[Path]]] = {}
        for source, path in staged:
            entry = work.setdefault(source.name, (source, []))
            if entry[0].reference != source.reference:
                raise UserError(
                    f"two problems named {source.name!r} in one batch ({entry[0].reference} "
                    f"and {source.reference}): give them files of different names"
                )
            if path not in entry[1]:
                entry[1].append(path)
        said = io.StringIO()
        with contextlib.redirect_stderr(said) if self.quiet else contextlib.nullcontext():
            outcome = judge_work(self.args, list(work.values()))
        return evaluations(outcome, {name: paths for name, (_, paths) in work.items()})


def evaluations(
    outcome: list[Any], given: dict[str, list[Path]]
) -> dict[tuple[str, Path], Evaluation]:
    """Each judged (problem, solution path)'s Evaluation, from a run's outcome
    (harness.run.scheduler.Judging); the solutions `given` for a problem the run refused get
    `problem_error` with its reason."""

    found: dict[tuple[str, Path], Evaluation] = {}
    for judging in outcome:
        name = judging.source.name
        if judging.refused is not None:
            for path in given.get(name, []):
                found[(name, path)] = refused(name, path, str(judging.refused))
        for record in judging.records:
            path = Path(record.solution_path)
            path = path if path.is_absolute() else REPO / path
            found[(name, path.resolve())] = evaluation_of(record)
    return found


def evaluation_of(record: RunRecord) -> Evaluation:
    """The Evaluation a record stands for."""
    from harness.results import report, summary

    timed = record.benchmarks if record.status == verdicts.OK else ()
    return Evaluation(
        problem=record.problem,
        solution=record.solution,
        status=record.status,
        detail=record.detail,
        speedup=summary.score(record),
        speedups=tuple(report.bench_speedup(row) for row in timed),
        sol_score=summary.sol_means(record)[1],
        rows=tuple(record.benchmarks),
        record=record,
    )


def refused(problem: str, solution: Path, why: str) -> Evaluation:
    """The Evaluation of a solution whose problem was refused before it ran."""
    return unjudged(problem, solution.stem, verdicts.PROBLEM_ERROR, why)


def unjudged(problem: str, solution: str, status: str, why: object) -> Evaluation:
    """An Evaluation without a record: `solution` never ran, for `why`."""
    return Evaluation(problem, Path(solution).stem, status, str(why), None, (), None, (), None)


def parsed_flags(flags: JsonObject, named: str = "Evaluator settings") -> argparse.Namespace:
    """run.py's namespace for `flags` (keyword names of its flags), checked as run.py checks
    them; a UserError with argparse's own message where one is bad."""
    from harness.run import flags as run_flags

    argv = ["--problem", PLACEHOLDER_PROBLEM]
    for key, value in flags.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is not False and value is not None:
            argv += [flag, str(value)]
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            return run_flags.parse_args(argv)
    except SystemExit:
        lines = said.getvalue().strip().splitlines()
        why = lines[-1].removeprefix("run.py: error: ") if lines else "not accepted"
        raise UserError(f"{named}: {why}") from None
