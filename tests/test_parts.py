"""Where a worker's seconds go: named parts, nested ones counted once."""

import pytest

from harness import stats


def test_an_inner_part_pauses_the_outer_one_and_taking_starts_the_count_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = iter([0.0, 1.0, 3.0, 4.0, 10.0, 10.5])  # each perf_counter() call, in order
    monkeypatch.setattr(stats.time, "perf_counter", lambda: next(clock))
    counted = stats.Parts()
    with counted.part("compare"), counted.part("float64"):  # 0.0; float64 1.0 .. 3.0
        pass
    # compare ends at 4.0: 1.0 before float64 and 1.0 after it
    with counted.part("compare"):  # 10.0 .. 10.5
        pass
    assert counted.taken() == {"compare": 2.5, "float64": 2.0}
    assert counted.taken() == {}


def test_a_part_that_raises_is_still_counted_and_closed() -> None:
    counted = stats.Parts()
    with pytest.raises(ValueError), counted.part("solution"):
        raise ValueError("the solution's fault")
    with counted.part("compare"):
        pass
    assert set(counted.taken()) == {"solution", "compare"}
