"""JSON-lines logs, atomic file writes and locked folders.

A log is appended one JSON line at a time, each flushed to disk as soon as it is written, so an
interrupted run keeps what it finished (harness.record keeps the run log this way, and
harness.results.baselines its cache). Tables replace their files atomically (write a temporary
file beside, then rename), so a reader never sees a half-written table. A lock file serialises
runs that write the same folder at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

LOCK_NAME = ".lock"


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on `folder` (blocks while another run holds it)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / LOCK_NAME, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def first_missing(folder: Path) -> Path | None:
    """The outermost of `folder` and the folders above it that does not exist, or None."""
    missing = None
    for path in (folder, *folder.parents):
        if path.exists():
            return missing
        missing = path
    return missing


def unwritable(folder: Path) -> str | None:
    """Why `folder` cannot be created or written (the system's reason), or None when it can:
    it is created if missing, and a file is written in it and removed again."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        return err.strerror or str(err)
    return None


def append(folder: Path, record: dict[str, Any], name: str) -> None:
    """Append `record` to the folder's log `name` as a single JSON line."""
    line = json.dumps(record, sort_keys=True) + "\n"
    with locked(folder), open(folder / name, "a+", encoding="utf-8") as log:
        if log.tell() and _last_byte(folder / name) != b"\n":  # a line torn by a killed writer
            line = "\n" + line  # stays alone, skipped by `read`; this one stays whole
        log.write(line)
        log.flush()
        os.fsync(log.fileno())


def _last_byte(path: Path) -> bytes:
    with open(path, "rb") as handle:
        handle.seek(-1, os.SEEK_END)
        return handle.read(1)


def read(folder: Path, name: str) -> list[dict[str, Any]]:
    """All records of the folder's log `name`, oldest first; unreadable lines
    are skipped."""
    path = folder / name
    if not path.exists():
        return []
    records, skipped = [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            skipped += 1
    if skipped:
        print(f"warning: {path}: skipped {skipped} unreadable line(s)", file=sys.stderr)
    return records


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` in one step: readers see the old file or the new, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        "w", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False, encoding="utf-8"
    ) as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(handle.name, 0o666 & ~_umask())  # a temporary file is private; a table is not
    try:
        os.replace(handle.name, path)
    except BaseException:
        os.unlink(handle.name)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
