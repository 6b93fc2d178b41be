"""run.py --resume: what is already recorded for the same solution, toolchain and settings.

A record stands for a solution when all of these are the same: the problem and its reference's
sources, the solution's sources (toolchain.source_hash), the toolchain (torch, CUDA, the GPU's
model, the build target) and every setting but those that differ from run to run by design: the
secret (fresh each run, unless given), the folders, and which GPU of the host it ran on.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import codec, record
from harness.record import RunRecord
from harness.run.discovery import ProblemSource
from harness.settings import Settings

if TYPE_CHECKING:
    from harness.run.session import Session

TOOLCHAIN = ("torch", "cuda", "gpu")  # of the machine, beside the settings' arch


def comparable(settings: Settings) -> dict[str, Any]:
    """The settings that decide a verdict and its numbers, as a dict."""
    data = codec.encode(settings)
    data.pop("places", None)
    data["checking"] = {k: v for k, v in data["checking"].items() if k != "secret"}
    data["device"] = str(data["device"]).partition(":")[0]  # cuda:1 and cuda:0 alike
    return data


class Earlier:
    """The session's results folder as the run began: its records, by solution content."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.settings = comparable(session.settings)
        self.toolchain = [getattr(session.machine, key) for key in TOOLCHAIN]
        log = session.folder / record.LOG_NAME
        self.by_content: dict[str, list[RunRecord]] = {}
        for ran in record.read(session.folder) if log.exists() else []:
            self.by_content.setdefault(ran.solution_hash, []).append(ran)

    def find(self, source: ProblemSource, solution: Path, content: str) -> RunRecord | None:
        """The newest record of this solution that the run would make again, or None."""
        reference = self.session.reference_hash(source)
        for ran in reversed(self.by_content.get(content, [])):
            if (
                ran.problem == source.name
                and ran.solution == solution.stem
                and ran.reference_hash == reference
                and [getattr(ran.machine, key) for key in TOOLCHAIN] == self.toolchain
                and comparable(ran.settings) == self.settings
            ):
                return ran
        return None
