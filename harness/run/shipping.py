"""A build and a log sent between the hosts of a Ray cluster (harness.run.raypool).

A build made on one host is of no use to a judge on another: the build task packs its build
folder (tar, into Ray's object store), and a judge whose cache lacks that folder unpacks it
there first, mtimes kept, so ninja finds the build up to date (a build for another torch or
target has another folder name, and is not unpacked). A worker's log is written where it ran;
where the driver's host lacks it, it is written there from a copy that comes back with the
result.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import shutil
import tarfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.measure.judged import Judged
from harness.measure.worker import Job

LOG_MAX_BYTES = 1 << 20  # the end of a longer log comes back
SHIP_MAX_BYTES = 512 << 20  # a bigger build folder is not shipped: its judge builds it again
SAFE: dict[str, Any] = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # 3.10.12+
# A file's mtime to the nanosecond, in its pax header: tar's own is a float, and ninja finds a
# build out of date when an output's mtime moved by a few nanoseconds (its deps log says when).
MTIME_NS = "KERNELBENCH.mtime_ns"


def pack(folder: Path) -> bytes | None:
    """`folder`'s files as a gzipped tar (mtimes kept), or None where it holds none or more
    than SHIP_MAX_BYTES."""
    if not folder.is_dir():
        return None
    sizes = [p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]
    if not sizes or sum(sizes) > SHIP_MAX_BYTES:
        return None

    def exact(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.pax_headers = {MTIME_NS: str(os.lstat(folder / info.name).st_mtime_ns)}
        return info

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        tar.add(folder, arcname=".", filter=exact)
    return buffer.getvalue()


def restore(folder: Path, fetch: Callable[[], Any]) -> bool:
    """Unpack the build that `fetch()` returns, (folder name, tar bytes) or None, as `folder`
    where this host's cache lacks it (missing or empty) and the name is `folder`'s; whether it
    did. Unpacked beside it, then renamed into place, so no judge sees half a folder."""
    if folder.is_dir() and any(folder.iterdir()):
        return False
    shipped = fetch()
    if shipped is None or shipped[0] != folder.name:
        return False
    folder.parent.mkdir(parents=True, exist_ok=True)
    part = folder.parent / f".{folder.name}.{os.getpid()}.{threading.get_ident()}.part"
    try:
        with tarfile.open(fileobj=io.BytesIO(shipped[1]), mode="r:gz") as tar:
            tar.extractall(part, **SAFE)
            for member in reversed(tar.getmembers()):  # a folder after what it holds
                ns = int(member.pax_headers[MTIME_NS])
                os.utime(part / member.name, ns=(ns, ns), follow_symlinks=False)
        os.rename(part, folder)  # over an empty folder too
    except (OSError, tarfile.TarError, KeyError, ValueError):  # or another judge was first
        return False
    finally:
        shutil.rmtree(part, ignore_errors=True)
    return True


def with_log(result: Judged, job: Job) -> Judged:
    """`result` with the end of the job's log, for a driver on another host."""
    try:
        with open(job.log_path, "rb") as log:
            log.seek(max(0, os.fstat(log.fileno()).st_size - LOG_MAX_BYTES))
            return dataclasses.replace(result, ray_log=log.read())
    except OSError:
        return result


def landed(result: Judged, job: Job) -> Judged:
    """The result as it came back, its log written where this host lacks it."""
    text, result = result.ray_log, dataclasses.replace(result, ray_log=None)
    log = Path(job.log_path)
    if text is not None and not log.exists():
        with contextlib.suppress(OSError):  # an unwritable log folder stops the run elsewhere
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_bytes(text)
    return result
