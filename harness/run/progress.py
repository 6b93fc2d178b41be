"""Tell the user what a long step is doing and for how long, on stderr.

On a terminal the current line is redrawn once a second; in a log or CI (not a terminal) a line
is printed when a step starts and every `QUIET_S` seconds while it lasts.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

QUIET_S = 30.0  # without a terminal, how often a long step says it is still going
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
        self.last_shown = 0.0

    def start(self, index: int, total: int, label: str) -> None:
        self.prefix = f"[{index}/{total}] {label}" if total else label
        self.doing, self.last_shown = PHASE_WORDS["start"], time.monotonic()
        self._show(self.doing, 0.0, force=self.live)

    def event(self, event: dict[str, Any]) -> None:
        kind = event.get("kind")
        if kind == "phase":  # on a terminal at once; in a log only if the step lasts
            self.doing = PHASE_WORDS.get(event["phase"], event["phase"])
            self._show(self.doing, 0.0, force=self.live)
        elif kind == "build_start":
            language = "CUDA" if event.get("cuda") else "C++"
            self._show(f"building {language} extension {event.get('name')}", 0.0, force=True)
        elif kind == "build_end":
            self._line(f"{self.prefix}: built {event.get('name')} in {event['seconds']:.1f} s")
        elif kind == "tick":
            self._show(self.doing, event["elapsed"])

    def finish(self, summary: str) -> None:
        self._line(f"{self.prefix}: {summary}")

    def note(self, text: str) -> None:
        self._line(text)

    def _show(self, doing: str, elapsed: float, force: bool = False) -> None:
        now = time.monotonic()
        interval = REDRAW_S if self.live else QUIET_S
        if not force and now - self.last_shown < interval:
            return
        self.doing, self.last_shown = doing, now
        text = f"{self.prefix}: {doing}" + (f" ... {elapsed:.0f} s" if elapsed >= 1 else "")
        if self.live:
            self.stream.write(f"\r\x1b[2K{text}")
            self.stream.flush()
        else:
            self._line(text)

    def _line(self, text: str) -> None:
        if self.live:
            self.stream.write("\r\x1b[2K")
        self.stream.write(text + "\n")
        self.stream.flush()
