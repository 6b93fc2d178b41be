"""The progress stream: what a long step shows, on a terminal and in a log."""

from __future__ import annotations

import io

import pytest

from harness.run import progress
from harness.run.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_in_a_log_a_long_step_says_how_far_it_has_come(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "QUIET_S", 0.0)  # every tick is shown
    stream = io.StringIO()
    shown = Progress(stream)
    shown.start(1, 2, "toy/good")
    shown.event({"kind": "phase", "phase": "check"})
    shown.event({"kind": "progress", "done": 7, "total": 15})
    shown.event({"kind": "tick", "phase": "check", "elapsed": 31.0})
    shown.event({"kind": "phase", "phase": "time"})  # a new step: its own count
    shown.event({"kind": "tick", "phase": "time", "elapsed": 2.0})
    shown.finish("ok")
    lines = stream.getvalue().splitlines()
    assert "[1/2] toy/good: checking 7/15 ... 31 s" in lines
    assert "[1/2] toy/good: timing ... 2 s" in lines
    assert lines[-1] == "[1/2] toy/good: ok" and "\r" not in stream.getvalue()


def test_on_a_terminal_the_counts_are_a_bar_that_goes_when_the_step_ends() -> None:
    stream = Terminal()
    shown = Progress(stream)
    shown.start(1, 1, "toy/good")
    shown.event({"kind": "phase", "phase": "check"})
    for done in range(1, 16):
        shown.event({"kind": "progress", "done": done, "total": 15})
    assert shown.bar is not None and shown.bar.n == 15
    assert "[1/1] toy/good: checking:   0%|" in stream.getvalue()  # tqdm's bar, drawn at once
    shown.event({"kind": "phase", "phase": "time"})
    assert shown.bar is None  # closed, and not left on the screen
    shown.finish("ok")
    assert stream.getvalue().endswith("[1/1] toy/good: ok\n")
