"""The referee: the reference's side of a solution's judging, in a process no solution enters.

Started by the parent (harness.run.refereeing) beside a solution's worker, it imports the
problem and never the solution, and answers the parent's requests on one duplex pipe:

  Plan      the evidence keys a correct solution's worker must leave (harness.measure.directed):
            every trial of every valid case, and every benchmark's check unless check-only
  Compare   a check's output left by the worker, against the reference's answer on the same
            seeds, by the run's criterion (the tolerance, or the accuracy rule against float64,
            or KernelBench's allclose): the mismatch, or None
  Expect    a sampling the worker announced (a Spec): the reference's side of it is built as the
            worker builds its own (the same seeds, input sets, timer) and served segment by
            segment (directed.Link.serve) until the parent ends it

Its answers, and only its answers, hold the reference's times, expected outputs and float64
answers that a verdict rests on. The files it reads were written by the solution's process: it
loads them with torch's weights-only loader (tensors and plain values, no code), no larger
than the reference's own answer allows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import os
import signal
import traceback
from pathlib import Path
from typing import Any

import torch

from harness import toolchain
from harness.loading import (
    Case,
    Problem,
    Seeds,
    load_problem,
    make_inputs,
    seed_everything,
)
from harness.measure import (
    benchmarking,
    checking,
    directed,
    gradients,
    hardware,
    kernelbench,
    worker,
)
from harness.measure.timing import WallTimer
from harness.settings import KERNELBENCH, Settings

EVIDENCE_SLACK_BYTES = 1 << 20  # a saved output's file may exceed its tensors' bytes by this


@dataclasses.dataclass(frozen=True)
class Plan:
    """Parent to referee: which evidence keys to expect."""


@dataclasses.dataclass(frozen=True)
class Compare:
    """Parent to referee: compare the output in `path` (evidence `key`, drawn on `device`)."""

    key: str
    path: str
    device: str


@dataclasses.dataclass(frozen=True)
class Expect:
    """Parent to referee: build the reference's side of `spec` on `device`, then serve it."""

    spec: directed.Spec
    device: str


@dataclasses.dataclass(frozen=True)
class Ready:
    """Referee to parent: the side of an Expect is built; `per_call`: model calls per timed
    call (a CUDA graph's replay makes several); `error`: why it could not be built."""

    per_call: int = 1
    error: str | None = None


@dataclasses.dataclass(frozen=True)
class Answer:
    """Referee to parent: a Plan's keys, a Compare's mismatch (None: it matches), or `error`,
    the referee's own failure (a harness error, never the solution's)."""

    keys: tuple[str, ...] = ()
    mismatch: str | None = None
    error: str | None = None


class Referee:
    """The referee's state: the problem, and the reference models and inputs it built."""

    def __init__(self, problem: Problem, settings: Settings) -> None:
        self.problem = problem
        self.settings = settings
        self.seeds = Seeds.of(settings.checking)
        self.models: dict[tuple[str, int, str], Any] = {}  # (kind, index, device): Model
        self.timers: dict[tuple[str, str], Any] = {}

    def plan(self) -> tuple[str, ...]:
        checking_ = self.settings.checking
        keys = [
            directed.case_key(index, trial)
            for index, case in enumerate(self.problem.cases)
            if checking_.case in (None, case.name) and not case.invalid
            for trial in range(1, checking_.trials + 1)
        ]
        if not checking_.check_only:
            keys += [directed.bench_key(i) for i in range(len(self.problem.benchmarks))]
        return tuple(keys)

    def _case(self, key: str) -> tuple[Case, int, int]:
        """The case of an evidence key, the seed its model is built from, and its inputs'."""
        kind, *numbers = key.split("-")
        index = int(numbers[0])
        if kind == "bench":
            seed = self.seeds.benchmark(index)
            return self.problem.benchmarks[index], seed, seed
        trial = int(numbers[1])
        return self.problem.cases[index], self.seeds.case(index), self.seeds.trial(index, trial)

    def model(self, case: Case, seed: int, device: torch.device) -> Any:
        found = self.models.get((case.name, seed, str(device)))
        if found is None:
            found = checking.build_model(
                self.problem.model, case, seed, device, dtype=self.problem.dtype
            )
            self.models = {(case.name, seed, str(device)): found}  # one at a time: memory
        return found

    def compare(self, request: Compare) -> str | None:
        """The mismatch of the evidence in `request.path` with the reference's answer."""
        if request.key not in self.plan():
            return f"{request.key} is not a check of this run"
        device = torch.device(request.device)
        case, model_seed, seed = self._case(request.key)
        reference = self.model(case, model_seed, device)
        inputs = make_inputs(case, seed, device)
        seed_everything(seed)
        with torch.no_grad():
            expected = checking.call(reference, inputs, device)
        path = Path(request.path)
        allowed = hardware.tensor_bytes(expected) + EVIDENCE_SLACK_BYTES
        if not path.is_file():
            return "its output never reached the referee"
        if path.stat().st_size > allowed:
            return f"its output file holds {path.stat().st_size} bytes, more than the answer's"
        try:
            actual = torch.load(path, map_location=device, weights_only=True)
        except Exception as err:  # what the solution's process wrote: its failure
            return f"its output could not be read back ({checking.describe_error(err)})"
        differs = checking.criterion(
            self.problem, case, self.settings.checking, reference, inputs, device
        )
        with torch.no_grad():
            return differs(expected, actual)

    def expect(self, request: Expect) -> tuple[Ready, Any, Any]:
        """The reference's call and timer for `request.spec`, built as the worker builds its
        side in harness.measure.benchmarking.sample."""
        spec, device = request.spec, torch.device(request.device)
        index = next(i for i, b in enumerate(self.problem.benchmarks) if b.name == spec.bench)
        bench, seed = self.problem.benchmarks[index], self.seeds.benchmark(index)
        model = self.model(bench, seed, device)
        inputs = make_inputs(bench, seed, device)
        step = None
        if spec.kind != benchmarking.FORWARD:
            with torch.no_grad():
                output = checking.call(model, inputs, device)
            known = {name for name, _ in model.named_parameters()}
            if spec.kind not in gradients.KINDS or not set(spec.params) <= known:
                raise ValueError(f"no such pass of the reference: {spec.kind} {spec.params}")
            step = gradients.Pass(spec.kind, output, list(spec.params))
        settings = self.settings
        if spec.timer == "cuda_graph":
            settings = _with_mode(settings, "cuda_graph")
        elif device.type == "cuda":
            settings = _with_mode(settings, "cuda_events")
        # fed and spot-checked as the worker's side is, so that the harness's own work per
        # call (copies, draws, checks) costs both sides alike, and the parent's clock compares
        # like with like (harness.run.refereeing)
        checked = model if step is None else gradients.Training(model, step.count, step.params)
        label = f"benchmark {spec.bench!r}, at the referee"
        checker = benchmarking.spot_checker(self.problem, bench, checked, device, settings, label)
        calls, per_call, _ = benchmarking.make_calls(
            {"solution": model}, (bench, seed), inputs, device, settings, checker, step
        )
        return Ready(per_call), calls["solution"], self.timer(spec.timer, device)

    def timer(self, method: str, device: torch.device) -> Any:
        key = (method, str(device))
        if key not in self.timers:
            self.timers[key] = _make_timer(method, device, self.settings)
        return self.timers[key]


def _make_timer(method: str, device: torch.device, settings: Settings) -> Any:
    if method == "wall_clock" or device.type != "cuda":
        return WallTimer()
    if method == "per_call":
        return benchmarking.PerCallTimer(device, settings.timing.flush)
    if method == "kernelbench":
        return kernelbench.KernelBenchTimer(device)
    return benchmarking.timer_for(device, settings, graphed=method == "cuda_graph")


def _with_mode(settings: Settings, mode: str) -> Settings:
    """`settings` timing as `mode` asks (graph replays, or events), whatever the run said."""
    graph = mode == "cuda_graph"
    return dataclasses.replace(settings, timing=dataclasses.replace(settings.timing, graph=graph))


def main(problem_name: str, reference: str, settings: Settings, log_path: str, conn: Any) -> None:
    """The referee's process: answer the parent on `conn` until it closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    worker.die_with_parent()  # killed with the run, even when the run is killed outright
    worker.own_resource_tracker()
    try:  # where its log cannot be written, it works on: its answers carry its failures
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        log = open(log_path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 (lives with it)
    except OSError:
        log = open(os.devnull, "a", encoding="utf-8")  # noqa: SIM115
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    faulthandler.enable(log)
    cuda_home = toolchain.find_cuda_home()
    if cuda_home:
        os.environ["CUDA_HOME"] = cuda_home
    torch.backends.cudnn.allow_tf32 = settings.checking.profile == KERNELBENCH
    torch.backends.cuda.matmul.allow_tf32 = False
    device = torch.device(settings.device)
    if device.type == "cuda":
        torch.cuda.set_device(torch.device("cuda", device.index or 0))
    problem = load_problem(problem_name, Path(reference), settings.checking.precision)
    referee = Referee(problem, settings)
    link = directed.Link(conn.send, conn.recv)
    print(f"referee of {problem_name}: ready", flush=True)
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        conn.send(_answer(referee, link, request))


def _answer(referee: Referee, link: directed.Link, request: Any) -> Any:
    """The answer to one request; a failure of the referee's own is an Answer's `error`."""
    try:
        if isinstance(request, Plan):
            return Answer(keys=referee.plan())
        if isinstance(request, Compare):
            return Answer(mismatch=referee.compare(request))
        if isinstance(request, Expect):
            ready, call, timer = referee.expect(request)
            link.send(ready)
            # KernelBench's evaluator times with autograd on, as the worker's side does
            graded = request.spec.timer == "kernelbench"
            with contextlib.nullcontext() if graded else torch.no_grad():
                link.serve("reference", call, timer)
            return Answer()
        return Answer(error=f"unknown request {request!r}")
    except directed.LinkBroken as err:
        return Answer(error=f"sampling abandoned: {err}")
    except Exception as err:
        traceback.print_exc()
        return Answer(error=checking.describe_error(err))
