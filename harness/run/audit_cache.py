"""The audits of earlier runs, kept so that a problem is audited once, not once a run.

A problem's audit (harness.measure.audit) reads only its reference: its answer is kept in the
build cache, `<build cache>/.audits/<key>.json`, under a key made of the reference's sources
(toolchain.source_hash), every file of the harness's own code (a change to how it audits makes
new keys), torch's version, the device (the GPU's name, or "cpu"), the tolerance the run
overrides and its profile (--as, with its tolerance). Only answers are kept, never an audit
that failed to run. A sweep of problems audited before goes straight to judging once its
first build is done.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path

from harness.measure.audit import REJECT, Audited
from harness.record import Finding

HARNESS = Path(__file__).resolve().parent.parent  # the package whose code makes the answers


class AuditCache:
    """Audit answers by key, in `folder` (see the module doc); `context` is what besides the
    reference the answer depends on here: torch, the device, the tolerance, the profile."""

    def __init__(self, folder: Path, context: str) -> None:
        self.folder = folder
        self.context = f"{context}|{harness_digest()}"

    def get(self, reference: str) -> Audited | None:
        """The answer kept for a reference of sources digest `reference`, or None."""
        try:
            kept = json.loads((self.folder / f"{self._key(reference)}.json").read_text())
            return Audited(tuple(Finding(**finding) for finding in kept["findings"]))
        except (OSError, ValueError, TypeError, KeyError):
            return None  # none kept, or unreadable: audited again

    def put(self, reference: str, answer: Audited) -> None:
        """Keep `answer` for the reference; not an audit that failed, nor one that found the
        reference failing (that may pass on another day: out of memory, say), and never the
        run's failure where the cache cannot be written."""
        if answer.error is not None or any(f.level == REJECT for f in answer.findings):
            return
        path = self.folder / f"{self._key(reference)}.json"
        text = json.dumps({"findings": [asdict(finding) for finding in answer.findings]})
        with contextlib.suppress(OSError):
            self.folder.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f"{path.name}.{os.getpid()}")
            partial.write_text(text)
            os.replace(partial, path)

    def _key(self, reference: str) -> str:
        return hashlib.sha256(f"{reference}|{self.context}".encode()).hexdigest()[:24]


@functools.cache
def harness_digest() -> str:
    """SHA-256 of every Python file of the harness package, read once a process."""
    digest = hashlib.sha256()
    for path in sorted(HARNESS.rglob("*.py")):
        digest.update(str(path.relative_to(HARNESS)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()
