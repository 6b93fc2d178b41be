"""Where a worker's seconds go inside its phases: named parts of judging a solution (inputs
drawn, models built, the reference's and the solution's calls, the harness's guards, the
comparisons, the float64 answer, gradients, timing, per-call timing, spot checks, the profile),
each timed on the host's clock. The worker sends them back with its result (`parts_s`), the
record keeps them, and a run's last lines sum them over its solutions.

Parts nest, and each second counts once: while an inner part runs, the outer one is paused
(the float64 answer computed inside a comparison counts as `float64`, not as `compare`). The
device's work counts in the part that waits for it (a comparison's result is read on the host).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager


class Parts:
    """Seconds by part name, each counted once (the module doc)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._open: list[tuple[str, float]] = []  # the parts running, innermost last, each
        # with the moment its current stretch began

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        now = time.perf_counter()
        if self._open:  # pause the part this one runs inside
            outer, began = self._open[-1]
            self._add(outer, now - began)
        self._open.append((name, now))
        try:
            yield
        finally:
            now = time.perf_counter()
            _, began = self._open.pop()
            self._add(name, now - began)
            if self._open:  # resume the outer part
                self._open[-1] = (self._open[-1][0], now)

    def _add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def taken(self) -> dict[str, float]:
        """The seconds so far, rounded to the millisecond; the count starts again."""
        taken = {name: round(s, 3) for name, s in self.seconds.items()}
        self.seconds = {}
        return taken


PARTS = Parts()  # the process's: a worker judges one solution at a time


def part(name: str) -> AbstractContextManager[None]:
    """`with part("compare"):` counts the block's seconds as `name` in the process's PARTS."""
    return PARTS.part(name)
