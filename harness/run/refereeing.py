"""The parent's side of a judging: it directs the timing rounds and decides from evidence.

A solution's worker runs its own code, so whatever it reports is a claim that Python in that
process could have written. Beside it runs a referee (harness.measure.referee), which never
imports a solution. This module, in the parent, holds the verdict's evidence:

- Timing. At each sampling the worker announces (`Rounds`), the parent runs the stop rule
  (harness.measure.timing.sample) over two remote sides: segments of up to CHUNK_ROUNDS calls,
  alternately the referee's (the reference's times: trusted) and the worker's (claimed). The
  worker is stopped (SIGSTOP) while the referee times. Both sides get the same sleep before each
  call. After each sampling, the worker makes a bare batch of its calls back to back, the
  parent's clock around it (`Sampling.confirmed`): a report of times that this clock does not
  bear out is rejected.
- Correctness. The worker writes each check's first output to its evidence folder; the referee
  compares each with the reference's answer on the same seeds. A worker's `ok` stands only when
  every check the referee's plan names was left and matches.
- The row. Each timed row's two measurements and speedups are replaced by the ones the parent
  kept (the reference's from the referee); a row the parent did not direct is rejected.

A worker's failure verdicts stand as it reports them: a solution can only harm itself there.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness import stats, verdicts
from harness.job import Judged
from harness.measure import directed, referee
from harness.measure.benchmarking import host_bound, per_call_rule
from harness.measure.timing import sample
from harness.record import BenchRow
from harness.run import rounds, staging
from harness.run.rounds import (
    REFEREE_START_S,
    Broken,
    DirectedTimer,
    RefereeFailed,
    RemoteSide,
    Sampling,
    reject,
)
from harness.settings import Settings
from harness.stats import Measurement, PerCall


class Judge:
    """The parent's evidence of one solution job: its referee (started when first needed), the
    samplings it directed, and the evidence compared. `worker_pid` is stopped while the
    referee times; `receive_worker(timeout)` reads the worker's next message."""

    def __init__(
        self,
        job: Any,
        worker_pid: int,
        to_worker: Callable[[Any], None],
        receive_worker: Callable[[float], Any],
        evidence: Path,
    ) -> None:
        self.job = job
        self.settings: Settings = job.settings
        self.worker_pid = worker_pid
        self.to_worker = to_worker
        self.receive_worker = receive_worker
        self.evidence = evidence
        self.process: Any = None
        self.conn: Any = None
        self.samplings: list[Sampling] = []
        self.compared: dict[str, str | None] = {}
        self.broken: Judged | None = None
        self.broken_own = False  # `broken` is the worker's own failure verdict
        self.plan: tuple[str, ...] | None = None

    # the referee's process

    def start(self) -> None:
        """Start the referee now, unless it runs: it imports and starts CUDA while the worker
        checks, so that the first answer the worker waits for costs no start."""
        if self.process is None:
            self._start()

    def ask(self, request: Any) -> Any:
        """The referee's answer to `request` (started first, when it is not yet running)."""
        self.start()
        self.conn.send(request)
        return self._receive(REFEREE_START_S)

    def _receive(self, timeout: float) -> Any:
        if not self.conn.poll(timeout):
            raise RefereeFailed(f"the referee did not answer within {timeout:g} s")
        try:
            return self.conn.recv()
        except (EOFError, OSError) as err:
            raise RefereeFailed(f"the referee died ({self.process.exitcode})") from err

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        self.conn, theirs = context.Pipe()
        args = (self.job.problem, self.job.reference, self.settings, self._log_path(), theirs)
        process = context.Process(target=referee.main, args=args, daemon=True)
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            with staging.spawning():
                process.start()
            self.process = process
        except OSError as err:  # no process to be had: the harness's failure
            raise RefereeFailed(f"the referee could not start: {err}") from err
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        theirs.close()

    def close(self) -> None:
        if self.process is None:
            return
        self.conn.close()
        self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)

    # evidence

    def compare_evidence(self, final: bool) -> None:
        """Have the referee compare each check's output the worker has left; at the end
        (`final`) also the ones it has not, which then count as missing."""
        if self.plan is None:
            self.plan = self._answer(referee.Plan()).keys
        for key in self.plan:
            if key in self.compared:
                continue
            found = sorted(self.evidence.glob(f"{key}@*.pt"))
            if not found and not final:
                continue
            if not found:
                self.compared[key] = "its output never reached the referee"
                continue
            device = found[0].name.removeprefix(f"{key}@").removesuffix(".pt")
            if device not in self._devices():
                self.compared[key] = f"its output was drawn on {device!r}, not this run's device"
                continue
            answer = self._answer(referee.Compare(key, str(found[0]), device))
            self.compared[key] = answer.mismatch
            found[0].unlink(missing_ok=True)

    def _devices(self) -> set[str]:
        device = self.settings.device
        return {"cpu", device, "cuda:0" if device == "cuda" else device}

    def _answer(self, request: Any) -> referee.Answer:
        answer = self.ask(request)
        if not isinstance(answer, referee.Answer) or answer.error is not None:
            raise RefereeFailed(
                getattr(answer, "error", None) or f"answered {rounds.shown(answer)}"
            )
        return answer

    # timing

    def direct(self, spec: directed.Spec) -> None:
        """Run the sampling the worker announced; what it kept goes to `samplings`."""
        if spec.device not in self._devices() or spec.timer not in directed.TIMERS:
            raise Broken(
                reject("report_unconfirmed", f"the worker asked to time {rounds.shown(spec)}")
            )
        ready = self.ask(referee.Expect(spec, spec.device))
        if not isinstance(ready, referee.Ready):
            raise RefereeFailed(getattr(ready, "error", None) or f"answered {rounds.shown(ready)}")
        if spec.per_call != ready.per_call:
            self._abort("the calls per replay differ")
            raise Broken(
                reject(
                    "report_unconfirmed",
                    f"the worker's graph replays {spec.per_call} calls, "
                    f"the referee's {ready.per_call}",
                )
            )
        sides = {
            "reference": RemoteSide(
                "referee", self.conn.send, self._receive, self._pause, self.process.pid
            ),
            "solution": RemoteSide(
                "worker", self.to_worker, self.receive_worker, None, self.worker_pid
            ),
        }
        for _ in range(rounds.SAMPLINGS):  # a busy machine can stretch one side's rounds
            kept, end = self._sampled_once(spec, sides)
            if spec.timer == "per_call" or self._borne_out(sides, kept):
                break
        self.to_worker(end)
        self.conn.send(end)
        self._answer_after_serving()
        self.samplings.append(kept)

    def _sampled_once(
        self, spec: directed.Spec, sides: dict[str, RemoteSide]
    ) -> tuple[Sampling, directed.RoundsEnd]:
        """One sampling of both sides by the stop rule: what the parent kept, and the end the
        two sides are sent if it stands."""
        timer = DirectedTimer(spec.timer, sides, spec.device.startswith("cuda"))
        try:
            sampled = self._sampled(spec, sides, timer)
        except Broken:
            self._abort("the other side failed")
            raise
        end = directed.RoundsEnd(
            sampled.stop,
            tuple(sampled.batches),
            sampled.measurements["reference"],
            sampled.measurements["solution"],
        )
        kept = Sampling(spec, end.reference, end.solution, timer.segments)
        kept.others_share = timer.others.share()
        return kept, end

    def _borne_out(self, sides: dict[str, RemoteSide], kept: Sampling) -> bool:
        """Whether the parent's clock bears out the sampling's reports (`kept` then holds the
        deciding try's batches, and the referee's log says what each try saw): a first try
        clear of its bound (Sampling.clear) decides at once; else rounds.BARE_TRIES tries are
        made, a pause before each (a busy machine can slow every batch of one try, as it can
        the unseen-work check's), and the middle one by score decides."""
        tries = []
        for attempt in range(rounds.BARE_TRIES):
            if attempt:
                time.sleep(rounds.BARE_PAUSE_S)
            others = rounds.OthersShare([self.worker_pid, self.process.pid])
            control, bare = self._bare(sides, kept)
            tries.append(replace(kept, control=control, bare=bare, bare_others=others.share()))
            self._log(tries[-1], first=not attempt)
            if attempt == 0 and tries[0].clear():
                break
        middle = sorted(tries, key=Sampling.score)[len(tries) // 2]
        kept.control, kept.bare, kept.bare_others = middle.control, middle.bare, middle.bare_others
        return kept.confirmed() is None

    def _bare(
        self, sides: dict[str, RemoteSide], kept: Sampling
    ) -> tuple[tuple[int, float], tuple[int, float]]:
        """Each side's calls back to back, bare (no fresh inputs, checks or flushes), then a
        wait for the device, the parent's clock around them: (calls, microseconds) of the
        reference's and of the solution's, the least of rounds.BARE_BATCHES batches each (the
        one least preempted on a busy machine), the two sides' batches taken in turn."""
        counts = {
            "reference": rounds.bare_count(rounds.per_call_us(kept.reference)),
            "solution": rounds.bare_count(rounds.per_call_us(kept.solution)),
        }
        walls: dict[str, list[float]] = {"reference": [], "solution": []}
        for _ in range(rounds.BARE_BATCHES):
            for name, side in sides.items():
                walls[name].append(side.ask(directed.Bare(counts[name]), "bare batch")[1])
        least = {name: (counts[name], min(walls[name])) for name in sides}
        return least["reference"], least["solution"]

    def _log(self, kept: Sampling, first: bool) -> None:
        """A line on a try of the sampling in the referee's log: what the parent's clock saw
        (`first`: the sampling's first try, with a line on its segments)."""
        segments = sum(1 for s in kept.segments if s.side == "solution")
        line = (
            f"parent: {kept.spec.bench} {kept.spec.kind} {kept.spec.timer}: {segments} segments, "
            f"bare {kept.bare}, ratio {kept.ratio()}, the reference's {kept.control}, "
            f"ratio {kept.control_ratio()}, allowed {kept.allowance()}, score {kept.score()}; "
            f"others' share of the processors {kept.bare_others} then, {kept.others_share} "
            "while sampling\n"
        )
        if first:
            each = " ".join(
                f"{s.side[0]}{s.count}:{s.wall_us:.0f}/{s.claimed_us:.0f}" for s in kept.segments
            )
            line += f"parent: segments (side count: wall/claimed us): {each}\n"
        with contextlib.suppress(OSError), open(self._log_path(), "a", encoding="utf-8") as log:
            log.write(line)

    def _log_path(self) -> str:
        return str(Path(self.job.log_path).with_suffix(".referee.log"))

    def _sampled(
        self, spec: directed.Spec, sides: dict[str, RemoteSide], timer: DirectedTimer
    ) -> Any:
        if spec.timer == "kernelbench":
            return rounds.kernelbench_sampled(sides, self.settings, timer)
        rule = self.settings.timing.rule
        rule = per_call_rule(rule) if spec.timer == "per_call" else rule
        return sample(dict(sides), timer, rule)  # type: ignore[arg-type]

    def _answer_after_serving(self) -> None:
        answer = self._receive(REFEREE_START_S)
        if not isinstance(answer, referee.Answer) or answer.error is not None:
            raise RefereeFailed(
                getattr(answer, "error", None) or f"answered {rounds.shown(answer)}"
            )

    def _abort(self, why: str) -> None:
        for send in (self.to_worker, self.conn.send):
            try:
                send(directed.Abort(why))
            except (OSError, ValueError):
                continue
        try:
            self._receive(REFEREE_START_S)
        except RefereeFailed:
            return

    def _pause(self, stop: bool) -> None:
        """Stop the worker (every thread of it) while the referee times; let it go after."""
        try:
            os.kill(self.worker_pid, signal.SIGSTOP if stop else signal.SIGCONT)
        except ProcessLookupError:
            return

    # the verdict

    def verdict(self, judged: Judged) -> Judged:
        """The job's verdict from the evidence: a failure as the worker reported it; an `ok`
        only where every check matched at the referee, every timed row was directed here, and
        the parent's clock bore out its times; its rows then hold the times kept here."""
        if self.broken is not None:
            return self.broken if self.broken_own else _with(judged, self.broken)
        if judged.status != verdicts.OK or judged.harness_error:
            return judged
        self.compare_evidence(final=True)
        for key, mismatch in self.compared.items():
            if mismatch is None:
                continue
            if "never reached" in mismatch:
                detail = f"{_described(key)}: {mismatch}"
                return _with(judged, reject("evidence_missing", detail))
            return _with(
                judged,
                Judged(verdicts.INCORRECT, f"{_described(key)}: {mismatch} (by the referee)"),
            )
        try:
            rows = tuple(self._row(row) for row in judged.benchmarks)
        except Broken as broken:
            return _with(judged, broken.judged)
        for kept in self.samplings:
            why = kept.confirmed()
            if why is not None:
                return _with(judged, reject("time_unconfirmed", why))
        return replace(judged, benchmarks=rows)

    def _row(self, row: BenchRow) -> BenchRow:
        """`row` with the times the parent kept: both sides' device times and per-call times,
        and their speedups, recomputed here."""
        kind = row.backward or "forward"
        kept = [s for s in self.samplings if _row_name(s.spec) == row.name and s.spec.kind == kind]
        main = [s for s in kept if s.spec.timer != "per_call"]
        if not main:
            raise Broken(
                reject(
                    "report_unconfirmed",
                    f"its row {row.name!r} was not timed under the harness's direction",
                )
            )
        sampling = main[-1]
        scale = sampling.spec.per_call
        reference = _scaled(sampling.reference, scale)
        solution = _scaled(sampling.solution, scale)
        if row.solution.times_us != solution.times_us:
            raise Broken(
                reject(
                    "report_unconfirmed",
                    f"its row {row.name!r} reports other times "
                    "than it gave while the harness timed it",
                )
            )
        speedup = replace(sampling, reference=reference, solution=solution).speedup()
        changed = replace(row, reference=reference, solution=solution, speedup=speedup)
        if sampling.others_share is not None and sampling.spec.device == "cpu":
            changed = replace(changed, others_cpu_share=round(sampling.others_share, 3))
        per_call = [s for s in kept if s.spec.timer == "per_call"]
        if per_call and row.per_call is not None:
            last = per_call[-1]
            per = stats.paired_ratio(last.reference.times_us, last.solution.times_us)
            changed = replace(
                changed,
                per_call=PerCall(last.reference, last.solution, per),
                host_bound=host_bound(speedup.value, per.value),
            )
        seen = sampling.ratio()
        return replace(changed, outside_ratio=None if seen is None else round(seen, 3))


def _row_name(spec: directed.Spec) -> str:
    from harness.measure import gradients

    return spec.bench if spec.kind == "forward" else gradients.row_name(spec.bench, spec.kind)


def _scaled(measured: Measurement, per_call: int) -> Measurement:
    if per_call == 1:
        return measured
    return replace(measured, times_us=tuple(t / per_call for t in measured.times_us))


def _with(judged: Judged, verdict: Judged) -> Judged:
    """`verdict` in place of `judged`'s, which keeps what its builds were."""
    return replace(
        judged,
        status=verdict.status,
        detail=verdict.detail,
        reason=verdict.reason,
        harness_error=verdict.harness_error,
        benchmarks=(),
    )


def _described(key: str) -> str:
    kind, *numbers = key.split("-")
    if kind == "bench":
        return f"benchmark {int(numbers[0]) + 1}'s check"
    return f"case {int(numbers[0]) + 1}, trial {numbers[1]}"
