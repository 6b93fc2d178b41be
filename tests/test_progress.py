"""The progress stream: what a long step shows, on a terminal and in a log."""

from __future__ import annotations

import io
from dataclasses import replace
from types import SimpleNamespace

import pytest

from harness import verdicts
from harness.job import BuildEnd, BuildStart, Count, Ended, Judged, Phase, Tick
from harness.record import Build
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
    shown.event(Phase("check"))
    shown.event(Count(7, 15))
    shown.event(Tick("check", elapsed=31.0))
    shown.event(Phase("time"))  # a new step: its own count
    shown.event(Tick("time", elapsed=2.0))
    shown.finish("ok")
    lines = stream.getvalue().splitlines()
    assert "[1/2] toy/good: checking 7/15 ... 31 s" in lines
    assert "[1/2] toy/good: timing ... 2 s" in lines
    assert lines[-1] == "[1/2] toy/good: ok" and "\r" not in stream.getvalue()


def test_a_long_check_names_its_case_and_what_stops_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "QUIET_S", 0.0)
    stream = io.StringIO()
    shown = Progress(stream)
    shown.start(1, 1, "toy/hangs")
    shown.event(Phase("check"))
    tick = Tick("check", case="beta=0.5", limit=300.0, flag="--timeout")
    shown.event(replace(tick, elapsed=5.0))
    shown.event(replace(tick, elapsed=27.0))
    shown.event(Tick("load", limit=1800.0, flag="--build-timeout", elapsed=90.0))
    lines = stream.getvalue().splitlines()
    assert "[1/1] toy/hangs: checking, case 'beta=0.5' ... 5 s" in lines  # short: no hint
    assert (
        "[1/1] toy/hangs: checking, case 'beta=0.5' ... 27 s "
        "(stopped at 300 s; --timeout SECONDS sets that)"
    ) in lines
    assert lines[-1].endswith("... 90 s (stopped at 1800 s; --build-timeout SECONDS sets that)")


def test_on_a_terminal_the_counts_are_a_bar_that_goes_when_the_step_ends() -> None:
    stream = Terminal()
    shown = Progress(stream)
    shown.start(1, 1, "toy/good")
    shown.event(Phase("check"))
    for done in range(1, 16):
        shown.event(Count(done, 15))
    assert shown.bar is not None and shown.bar.n == 15
    assert "[1/1] toy/good: checking:   0%|" in stream.getvalue()  # tqdm's bar, drawn at once
    shown.event(Phase("time"))
    assert shown.bar is None  # closed, and not left on the screen
    shown.finish("ok")
    assert stream.getvalue().endswith("[1/1] toy/good: ok\n")


def test_an_extension_built_by_the_run_is_not_then_claimed_from_the_cache() -> None:
    from harness.run.reporting import SerialReport

    stream = io.StringIO()
    shown = Progress(stream)
    report = SerialReport(shown)

    built = Judged(verdicts.OK, builds=(Build("toy_ext", cuda=False, seconds=40.6),))
    unit = SimpleNamespace(index=1, total=1, label="toy/cpp_extension", built=Ended(built))
    report.built(unit, built)  # type: ignore[arg-type]  # a stand-in unit
    on_event = report.judging(unit, "cpu")  # type: ignore[arg-type]
    on_event(BuildStart("toy_ext", found=True))
    on_event(BuildEnd("toy_ext", 0.1, cached=True))
    on_event(BuildStart("other_ext", found=True))
    on_event(BuildEnd("other_ext", 0.1, cached=True))
    lines = stream.getvalue().splitlines()
    assert lines[0] == "toy/cpp_extension: built toy_ext in 40.6 s"
    assert not any("toy_ext from the build cache" in line for line in lines)
    assert "[1/1] toy/cpp_extension: loading C++ extension toy_ext (built above)" in lines
    assert "[1/1] toy/cpp_extension: loaded other_ext from the build cache" in lines
