"""Timing rounds the parent directs, and the outputs a worker leaves for the referee.

A solution's worker and its referee (harness.measure.referee, a process that never imports a
solution) each hold one side of a side-by-side timing. At each sampling the worker says where
it is (`Rounds`: the benchmark, its backward kind, the timer) and from then on only answers:
each `Segment` asks for that many timed calls of its side, answered by `Timed`; `RoundsEnd`
closes the sampling and hands back both sides' kept samples, so that the worker's row reads as
before. The referee serves the reference's side the same way, through the same `Link.serve`.
The parent runs the stop rule, pairs the rounds, and holds its own clock around every segment
(harness.run.refereeing): what the worker reports is a claim, which the parent's clock must bear
out.

Evidence: in a directed job the worker writes the first output of every check (each trial of
each case, and each benchmark's check) into the job's evidence folder (`Evidence`); the referee
computes the reference's answer on the same seeds and compares, in its own process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from harness.measure import timing
from harness.stats import Measurement

# The timers a side can be asked to sample with (Spec.timer): the timing module's methods, the
# per-call timer of harness.measure.benchmarking, and KernelBench's (harness.measure.kernelbench).
TIMERS = ("cuda_events", "cuda_graph", "wall_clock", "per_call", "kernelbench")


@dataclass(frozen=True)
class Spec:
    """One sampling: benchmark `bench` (its name), the pass timed (`kind`: "forward" or a
    backward kind of harness.measure.gradients, with the parameters whose gradients it takes),
    the timer, and how many model calls one timed call makes (a CUDA graph's replay: several)."""

    bench: str
    kind: str
    timer: str
    params: tuple[str, ...] = ()
    per_call: int = 1
    device: str = "cpu"  # where the worker runs the solution: the run's device, or the CPU


@dataclass(frozen=True)
class Rounds:
    """Worker to parent: it reached a sampling (`spec`) and waits for Segments."""

    spec: Spec


@dataclass(frozen=True)
class Segment:
    """Parent to a side: time `count` calls now. `cover_us`: the sleep that hides each call's
    host time (harness.measure.timing.CudaTimer), the same for both sides; `first`: the
    sampling's first segment (KernelBench's timer warms up then)."""

    count: int
    cover_us: float | None = None
    first: bool = False


@dataclass(frozen=True)
class Bare:
    """Parent to the worker: make `count` calls back to back now, on the inputs of the last
    timed call, with nothing between them, then wait for the device; answered by an empty
    Timed. The parent's clock spans it (harness.run.refereeing)."""

    count: int


@dataclass(frozen=True)
class Timed:
    """A side's answer to a Segment: each call's time (microseconds), its call's median host
    time and whether its call waits for the device, where the timer knows them."""

    times_us: tuple[float, ...]
    host_us: float | None = None
    waits: bool | None = None
    checks: int = 0  # timed calls spot-checked during the segment (harness.measure.feeding)


@dataclass(frozen=True)
class RoundsEnd:
    """Parent to a side: the sampling is over; both sides' samples as the parent kept them."""

    stop: str
    batches: tuple[int, ...]
    reference: Measurement
    solution: Measurement


@dataclass(frozen=True)
class Abort:
    """Parent to a side: the sampling is abandoned (the other side failed); stop serving."""

    why: str


class LinkBroken(Exception):
    """The parent ended the directed sampling (Abort), or the link closed."""


class Link:
    """One side's end of the directed rounds: `send` to the parent, `receive` from it."""

    def __init__(self, send: Callable[[Any], None], receive: Callable[[], Any]) -> None:
        self.send = send
        self.receive = receive

    def sample(
        self,
        spec: Spec,
        call: timing.Call,
        timer: Any,
        after: Callable[[int], None] | None = None,
    ) -> timing.Sampled:
        """The worker's side of a sampling: announce it, serve it, and return the samples the
        parent kept, as timing.sample would have returned them. `after` hears each segment's
        size (the GPU's state is read then)."""
        self.send(Rounds(spec))
        end = self.serve("solution", call, timer, after)
        measured = {"reference": end.reference, "solution": end.solution}
        return timing.Sampled(measured, end.stop, list(end.batches))

    def serve(
        self,
        name: str,
        call: timing.Call,
        timer: Any,
        after: Callable[[int], None] | None = None,
    ) -> RoundsEnd:
        """Time `call` (named `name`, the side) with `timer` for each Segment until RoundsEnd."""
        reset = getattr(timer, "reset", None)
        if reset is not None:
            reset()
        named = timing._Named(name, call)
        while True:
            message = self.receive()
            if isinstance(message, RoundsEnd):
                return message
            if isinstance(message, Bare):
                for _ in range(message.count):
                    call()
                if torch.cuda.is_initialized():
                    torch.cuda.synchronize()
                self.send(Timed(()))
                continue
            if not isinstance(message, Segment):
                raise LinkBroken(getattr(message, "why", f"unexpected {message!r}"))
            if hasattr(timer, "fixed_cover_us"):
                timer.fixed_cover_us = message.cover_us
            if message.first and hasattr(timer, "warm_up"):
                timer.warm_up(call)
            checked = _checked(call)
            times = timer.run([named] * message.count)
            host = getattr(timer, "host_us", {}).get(name)
            waits = getattr(timer, "synchronizing", {}).get(name)
            checks = _checked(call) - checked
            self.send(Timed(tuple(float(t) for t in times), host, waits, checks))
            if after is not None:
                after(message.count)


def _checked(call: Any) -> int:
    """How many of `call`'s timed calls its spot checker has checked so far."""
    return int(getattr(getattr(call, "checker", None), "checked", 0))


LINK: Link | None = None  # set in a directed worker (harness.measure.worker), else None


class Evidence:
    """Where a directed worker leaves each check's output for the referee: one file a check,
    named by `key` (harness.measure.referee reads it back with weights_only, tensors only)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.device = "cpu"  # where the checks draw their inputs (the worker sets it)
        folder.mkdir(parents=True, exist_ok=True)

    def keep(self, key: str, output: Any) -> None:
        """Save `output`, on the CPU; an output that cannot be copied there (a meta tensor, say)
        is saved as a note saying so, which matches no answer."""
        try:
            kept = _on_cpu(output)
        except Exception as err:  # the solution's output, not the harness: its verdict says
            kept = f"an output the harness could not copy: {type(err).__name__}"
        torch.save(kept, self.folder / evidence_name(key, self.device))


def evidence_name(key: str, device: str) -> str:
    """The file of evidence `key`, drawn on `device`."""
    return f"{key}@{device}.pt"


def case_key(index: int, trial: int) -> str:
    """The evidence of trial `trial` of case `index` (the case's place in problem.cases)."""
    return f"case-{index}-{trial}"


def bench_key(index: int) -> str:
    """The evidence of benchmark `index`'s check, made before it is timed."""
    return f"bench-{index}"


def _on_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu")
    if isinstance(value, list):
        return [_on_cpu(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_on_cpu(v) for v in value)
    return value


EVIDENCE: Evidence | None = None  # set in a directed worker, else None
