"""Frozen dataclasses to JSON-ready values and back: the one codec for what is written to the
run log, the baselines and the ncu spec, and what crosses from a worker to the parent.

`encode` writes each field of a dataclass under its name (tuples as lists, paths as strings,
nested dataclasses as objects), leaves out a field whose value is the one its metadata names
(`omitted_when(None)`: a key written only where it applies), and adds the properties a class
lists in its `DERIVED` class attribute (statistics written for people reading the JSON, never
read back). `decode` reads them back by the fields' type hints: keys it does not know are
ignored (an older or newer writer's), a missing key or a null for a field that takes no None
gives the field's default, and a class with an `upgraded` static method has its older JSON
forms turned into the current one first.

JSON-lines logs, atomic file writes and locked folders.

A log is appended one JSON line at a time, each flushed to disk as soon as it is written, so an
interrupted run keeps what it finished (harness.record keeps the run log this way, and
harness.results.baselines its cache). Tables replace their files atomically (write a temporary
file beside, then rename), so a reader never sees a half-written table. A lock file serialises
runs that write the same folder at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import json
import os
import sys
import tempfile
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeAlias, TypeVar

T = TypeVar("T")
OMIT = "omitted_when"  # field metadata: the value that leaves the field out of the JSON
_UNIONS = (typing.Union, types.UnionType)
# A JSON value as json.loads gives it, and an object of them (a line of a JSON-lines log)
Json: TypeAlias = bool | int | float | str | list["Json"] | dict[str, "Json"] | None
JsonObject: TypeAlias = dict[str, Json]


def omitted_when(value: object = None) -> dict[str, object]:
    """Field metadata: leave the field out of the JSON when it holds `value` (None, False or
    an empty tuple)."""
    return {OMIT: value}


def encode(value: Any) -> Any:
    """`value` as JSON-ready data (module doc)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        data = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if OMIT in f.metadata and (item is f.metadata[OMIT] or item == () == f.metadata[OMIT]):
                continue
            data[f.name] = encode(item)
        for name in getattr(type(value), "DERIVED", ()):
            data[name] = encode(getattr(value, name))
        return data
    if isinstance(value, (tuple, list)):
        return [encode(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): encode(item) for key, item in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value


def decode(cls: type[T], data: Mapping[str, object]) -> T:
    """A `cls` from `encode`'s form (module doc). Raises TypeError or ValueError for data that
    is not one (a required field missing, a field of the wrong shape)."""
    if not isinstance(data, Mapping):
        raise TypeError(f"{cls.__name__}: expected an object, got {type(data).__name__}")
    upgraded = getattr(cls, "upgraded", None)
    if upgraded is not None:
        data = upgraded(data)
    values = {}
    for name, read, defaulted in _plan(cls):  # type: ignore[arg-type]
        if name not in data:
            continue
        raw = data[name]
        if raw is not None:
            values[name] = read(raw)
        elif not defaulted:
            values[name] = None
    return cls(**values)


def decode_value(hint: Any, raw: Any) -> Any:
    """`raw` read as a value of type `hint` (a field's annotation), as `decode` reads fields."""
    return None if raw is None else _reader(hint)(raw)


@functools.cache
def hints(cls: type) -> dict[str, object]:
    """The type of each field of `cls`, read once."""
    return typing.get_type_hints(cls)


@functools.cache
def _plan(cls: type) -> list[tuple[str, Callable[[Any], Any], bool]]:
    """How `decode` reads each field of `cls`: its name, its reader, and whether a null gives
    the field its default (a field with one, not typed as a union)."""
    field_types = hints(cls)
    plan = []
    for f in dataclasses.fields(cls):
        hint = field_types[f.name]
        has_default = (
            f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        )
        union = typing.get_origin(hint) in _UNIONS
        plan.append((f.name, _reader(hint), has_default and not union))
    return plan


def _same(raw: Any) -> Any:
    return raw


def _nullable(read: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`read`, with a null read as None."""
    return read if read is _same else (lambda raw: None if raw is None else read(raw))


@functools.cache
def _reader(hint: Any) -> Callable[[Any], Any]:
    """How a JSON value (not null) is read as `hint`, made once per type: the scalars and the
    tuples of them (a record's samples) are read as they come, without a call per item."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in _UNIONS:
        choices = [a for a in args if a is not type(None)]
        return _nullable(_reader(choices[0])) if len(choices) == 1 else _same
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        item = _nullable(_reader(args[0]))
        return tuple if item is _same else (lambda raw: tuple(item(x) for x in raw))
    if origin is tuple:
        items = [_nullable(_reader(a)) for a in args]
        return lambda raw: tuple(read(x) for read, x in zip(items, raw, strict=True))
    if origin is list:
        item = _nullable(_reader(args[0]))
        return list if item is _same else (lambda raw: [item(x) for x in raw])
    if origin is dict:
        value = _nullable(_reader(args[1]))
        return lambda raw: {key: value(item) for key, item in raw.items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return functools.partial(decode, hint)
    if hint is Path:
        return Path
    return _same


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


def append(folder: Path, record: Mapping[str, Json], name: str) -> None:
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


def read(folder: Path, name: str) -> list[JsonObject]:
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
