"""Tell the user what a long step is doing, how far it has come and for how long, on stderr.

On a terminal the current line is redrawn once a second, and the checks and the timed shapes
show as a progress bar (tqdm); in a log or CI (not a terminal) a line is printed when a step
starts and every `QUIET_S` seconds while it lasts, with the count done ("checking 7/15").
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from tqdm import tqdm

from harness.job import BuildEnd, BuildStart, Count, Event, Phase, Tick

QUIET_S = 30.0  # without a terminal, how often a long step says it is still going
HINT_S = 20.0  # a step running this long says what stops it and which flag sets that
REDRAW_S = 1.0

PHASE_WORDS = {
    "start": "starting worker",
    "load": "importing",
    "check": "checking",
    "time": "timing",
}


class Progress:
    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr  # looked up now: a redirected stderr is followed
        self.live = self.stream.isatty()
        self.prefix = ""
        self.doing = ""
        self.count = ""  # "7/15" once the step counts what it does
        self.last_shown = 0.0
        self.bar: tqdm | None = None
        self.lock = threading.RLock()  # the pool's build lines come from other threads
        self.built_here: set[str] = set()  # extensions this run's build job just built

    def start(self, index: int, total: int, label: str) -> None:
        self.prefix = f"[{index}/{total}] {label}" if total else label
        self.doing, self.last_shown = PHASE_WORDS["start"], time.monotonic()
        self._show(self.doing, 0.0, force=self.live)

    def event(self, event: Event) -> None:
        if isinstance(event, Phase):  # on a terminal at once; in a log only if the step lasts
            self._close_bar()
            self.doing, self.count = PHASE_WORDS.get(event.phase, event.phase), ""
            self._show(self.doing, 0.0, force=self.live)
        elif isinstance(event, Count):
            self._count(event.done, event.total)
        elif isinstance(event, BuildStart):
            self._show(_building(event, event.name in self.built_here), 0.0, force=True)
        elif isinstance(event, BuildEnd):
            name = event.name
            if name in self.built_here and event.cached:
                pass  # built by this run a line above, and now only loaded: nothing new to say
            elif event.cached:  # nothing was compiled: claim no build
                self._line(f"{self.prefix}: loaded {name} from the build cache")
            else:
                self._line(f"{self.prefix}: {built_line(name, event.seconds, event.hint)}")
        elif isinstance(event, Tick) and self.bar is None:
            self._show(self.doing, event.elapsed, *_waiting(event))

    def finish(self, summary: str) -> None:
        self._close_bar()
        self._line(f"{self.prefix}: {summary}")

    def _count(self, done: int, total: int) -> None:
        """A step's count: the bar on a terminal, else part of the step's periodic line."""
        self.count = f"{done}/{total}"
        if not self.live:
            return
        if self.bar is None or self.bar.total != total:
            self._close_bar()
            self.stream.write("\r\x1b[2K")
            self.bar = tqdm(
                total=total, desc=f"{self.prefix}: {self.doing}", file=self.stream, leave=False
            )
        self.bar.update(done - self.bar.n)

    def _close_bar(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def note(self, text: str) -> None:
        self._line(text)

    def _show(
        self, doing: str, elapsed: float, case: str = "", hint: str = "", force: bool = False
    ) -> None:
        with self.lock:
            self._redraw(doing, elapsed, case, hint, force)

    def _redraw(self, doing: str, elapsed: float, case: str, hint: str, force: bool) -> None:
        now = time.monotonic()
        interval = REDRAW_S if self.live else QUIET_S
        if not force and now - self.last_shown < interval:
            return
        count = f" {self.count}" if self.count and doing == self.doing else ""
        self.doing, self.last_shown = doing, now
        text = f"{self.prefix}: {doing}{count}{case}"
        text += f" ... {elapsed:.0f} s" if elapsed >= 1 else ""
        text += f" {hint}" if hint and elapsed >= HINT_S else ""  # a hang? say what ends it
        if self.live:
            self.stream.write(f"\r\x1b[2K{text}")
            self.stream.flush()
        else:
            self._line(text)

    def _line(self, text: str) -> None:
        with self.lock:
            if self.live:
                self.stream.write("\r\x1b[2K")
            self.stream.write(text + "\n")
            self.stream.flush()


def built_line(name: str, seconds: float, hint: str | None) -> str:
    """'built NAME in 40.6 s', with how it could build faster where there is a way."""
    return f"built {name} in {seconds:.1f} s" + (f" ({hint})" if hint else "")


def _waiting(event: Tick) -> tuple[str, str]:
    """What a tick adds to its step's line: ', case NAME' while a check is on a case, and what
    stops the step and which flag sets that ('' for each where it does not apply)."""
    case = event.case
    on_case = f", case {case!r}" if case is not None and event.phase == "check" else ""
    limit, flag = event.limit, event.flag
    hint = f"(stopped at {limit:g} s; {flag} SECONDS sets that)" if limit and flag else ""
    return on_case, hint


def _building(event: BuildStart, built_here: bool = False) -> str:
    """What a build that starts is doing: loading from the cache where its module was found
    there (the end says whether it was), else building."""
    language = "CUDA" if event.cuda else "C++"
    if event.found and built_here:
        return f"loading {language} extension {event.name} (built above)"
    if event.found:
        return f"loading {language} extension {event.name} from the build cache"
    return f"building {language} extension {event.name}"
