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
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
OMIT = "omitted_when"  # field metadata: the value that leaves the field out of the JSON
_SKIP = object()  # a value that gives the field its default


def omitted_when(value: Any = None) -> dict[str, Any]:
    """Field metadata: leave the field out of the JSON when it holds `value` (None or False)."""
    return {OMIT: value}


def encode(value: Any) -> Any:
    """`value` as JSON-ready data (module doc)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        data = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if OMIT in f.metadata and item is f.metadata[OMIT]:
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


def decode(cls: type[T], data: Mapping[str, Any]) -> T:
    """A `cls` from `encode`'s form (module doc). Raises TypeError or ValueError for data that
    is not one (a required field missing, a field of the wrong shape)."""
    if not isinstance(data, Mapping):
        raise TypeError(f"{cls.__name__}: expected an object, got {type(data).__name__}")
    upgraded = getattr(cls, "upgraded", None)
    if upgraded is not None:
        data = upgraded(data)
    field_types = hints(cls)  # type: ignore[arg-type]
    values = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in data:
            value = _value(field_types[f.name], data[f.name], f)
            if value is not _SKIP:
                values[f.name] = value
    return cls(**values)


def decode_value(hint: Any, raw: Any) -> Any:
    """`raw` read as a value of type `hint` (a field's annotation), as `decode` reads fields."""
    value = _value(hint, raw)
    return None if value is _SKIP else value


@functools.cache
def hints(cls: type) -> dict[str, Any]:
    """The type of each field of `cls`, read once."""
    return typing.get_type_hints(cls)


def _value(hint: Any, raw: Any, field: dataclasses.Field[Any] | None = None) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if raw is None and type(None) in args:
            return None
        choices = [a for a in args if a is not type(None)]
        return _value(choices[0], raw, field) if len(choices) == 1 else raw
    if raw is None:
        has_default = field is not None and (
            field.default is not dataclasses.MISSING
            or field.default_factory is not dataclasses.MISSING
        )
        return _SKIP if has_default else None
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_value(args[0], item) for item in raw)
        return tuple(_value(a, item) for a, item in zip(args, raw, strict=True))
    if origin is list:
        return [_value(args[0], item) for item in raw]
    if origin is dict:
        return {key: _value(args[1], item) for key, item in raw.items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return decode(hint, raw)
    if hint is Path:
        return Path(raw)
    return raw
