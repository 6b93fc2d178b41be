"""Fresh inputs for every timed call, and spot checks of the solution's timed outputs.

A `Feed` holds a few input sets of one side (reference or solution), drawn from the benchmark's
generator. Before each timed call, outside the timed region, it picks one set at random and
swaps two values within one row of the set's first floating-point input, so no two calls see the
same inputs: an output cached by pointer, shape or content is stale on the next call. Both sides
use the same random choices, so their calls see the same stream of inputs.

A `SpotChecker` picks some of the solution's timed calls at random (more of the early ones) and
checks each after it ran: the output against the reference on a pristine copy of the same
inputs, and the rules of harness.anticheat (no aliasing, inputs unchanged, a plain tensor).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import torch

from harness import status
from harness.errors import Verdict
from harness.inputs import replicate_all
from harness.matching import Tolerance, mismatch
from harness.measure import anticheat

# (output, pristine inputs, label) -> raises on a mismatch
Check = Callable[[Any, list[Any], str], None]


def perturb(inputs: list[Any], rng: random.Random) -> None:
    """Swap two values within one row (along the last dimension) of the first floating-point
    input tensor that has a row of at least two values and no overlapping memory."""
    for tensor in inputs:
        if (
            not isinstance(tensor, torch.Tensor)
            or not tensor.is_floating_point()
            or tensor.dim() == 0
            or tensor.shape[-1] < 2
            or tensor.numel() == 0
            or 0 in tensor.stride()
        ):
            continue
        row = tuple(rng.randrange(size) for size in tensor.shape[:-1])
        first, second = rng.sample(range(tensor.shape[-1]), 2)
        at_first, at_second = (*row, first), (*row, second)
        held = tensor[at_first].clone()
        tensor[at_first] = tensor[at_second]
        tensor[at_second] = held
        return


class SpotChecker:
    """Chooses which timed calls to check and checks them (see the module doc)."""

    EARLY_CALLS = 64  # the first calls are checked with EARLY_P, later ones with LATE_P
    EARLY_P = 1 / 8
    LATE_P = 1 / 64
    MAX_CHECKS = 24

    def __init__(self, check: Check, rng: random.Random, device: torch.device, label: str):
        self.check = check
        self.rng = rng
        self.device = device
        self.label = label
        self.calls = 0
        self.checked = 0
        self.forced = 0
        self.pending: tuple[int, list[Any], list[Any]] | None = None  # call, given, pristine
        self.output: Any = None

    def force(self, count: int) -> None:
        """Check the next `count` calls, whatever the dice say."""
        self.forced += count

    def before(self, inputs: list[Any]) -> None:
        """Called before each call on `inputs`: settle the last check, and maybe plan one."""
        self.settle()
        self.calls += 1
        chance = self.EARLY_P if self.calls <= self.EARLY_CALLS else self.LATE_P
        wanted = self.forced > 0 or (self.checked < self.MAX_CHECKS and self.rng.random() < chance)
        if wanted:
            self.forced = max(0, self.forced - 1)
            self.pending = (self.calls, inputs, replicate_all(inputs, self.device))
            self.output = None

    def after(self, output: Any) -> None:
        if self.pending is not None and self.output is None:
            self.output = output

    def settle(self) -> None:
        """Check the pending call, if any (waits for the device)."""
        if self.pending is None:
            return
        number, given, pristine = self.pending
        self.pending = None
        output, self.output = self.output, None
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        label = f"{self.label}, timed call {number}"
        anticheat.require_plain(output, label)
        anticheat.check_call(anticheat.Call(given, output), pristine, pristine, label)
        self.check(output, pristine, label)
        self.checked += 1


class Feed:
    """One side's input sets and its zero-argument call for the timer (see the module doc)."""

    def __init__(
        self,
        model: Any,
        sets: list[list[Any]],
        seed: int,
        checker: SpotChecker | None = None,
    ) -> None:
        self.model = model
        self.sets = sets
        self.rng = random.Random(seed)
        self.checker = checker
        self.current = sets[0]

    def prepare(self) -> None:
        """Outside the timed region: settle the last spot check, then choose and change the
        next call's inputs."""
        if self.checker is not None:
            self.checker.settle()
        self.current = self.sets[self.rng.randrange(len(self.sets))]
        perturb(self.current, self.rng)
        if self.checker is not None:
            self.checker.before(self.current)

    def __call__(self) -> object:
        output = self.model(*self.current)
        if self.checker is not None:
            self.checker.after(output)
        return output


def output_check(reference: Any, device: torch.device, tolerance: Tolerance) -> Check:
    """A Check comparing an output with the reference's on the same (pristine) inputs."""

    def check(output: Any, pristine: list[Any], label: str) -> None:
        expected = reference(*replicate_all(pristine, device))
        report = mismatch(expected, output, tolerance)
        if report:
            raise Verdict(status.INCORRECT, f"{label}: {report}{anticheat.poison_note(output)}")

    return check
