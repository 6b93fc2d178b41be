"""harness.codec: what a run log's JSON reads back as, null by null (the readers are made once
per type, so a record's thousands of samples are not read one call each)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness import codec


@dataclass(frozen=True)
class Inner:
    name: str
    samples: tuple[float, ...] = ()


@dataclass(frozen=True)
class Outer:
    inner: Inner
    rows: tuple[Inner, ...] = ()
    pair: tuple[int, str] = (0, "")
    where: Path | None = None
    count: int = 7
    tags: list[str] = field(default_factory=list)
    parts: dict[str, float | None] = field(default_factory=dict)
    either: int | str = 3


def test_a_value_comes_back_as_it_was_written() -> None:
    made = Outer(
        Inner("a", (1.0, 2.5)),
        (Inner("b"), Inner("c", (3.0,))),
        (2, "x"),
        Path("/tmp/x"),
        9,
        ["t"],
        {"check": 1.5, "time": None},
        "s",
    )
    assert codec.decode(Outer, codec.encode(made)) == made
    assert isinstance(codec.decode(Outer, codec.encode(made)).rows[1].samples, tuple)


def test_nulls_and_missing_keys_read_as_the_module_says() -> None:
    read = codec.decode(
        Outer,
        {
            "inner": {"name": "a", "samples": None, "unknown": 1},
            "where": None,
            "count": None,  # takes no None: its default
            "tags": None,
            "parts": {"check": None},
            "either": None,  # a union: read as it is
            "later": "a newer writer's key",
        },
    )
    assert read == Outer(Inner("a"), where=None, count=7, parts={"check": None}, either=None)  # type: ignore[arg-type]
    assert codec.decode_value(tuple[float, ...], [1, 2]) == (1, 2)
    assert codec.decode_value(Path | None, None) is None


def test_data_of_the_wrong_shape_is_an_error() -> None:
    with pytest.raises(TypeError):
        codec.decode(Outer, ["not", "an", "object"])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        codec.decode(Outer, {})  # `inner` has no default
    with pytest.raises(ValueError):
        codec.decode(Outer, {"inner": {"name": "a"}, "pair": [1, "x", "extra"]})
