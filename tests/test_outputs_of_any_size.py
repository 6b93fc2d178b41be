"""Outputs of any size: every comparison and defence that reads an output does it a block at a
time (harness.accuracy), and says the same as it did on the whole; a failure of the harness's own
comparison is the harness's, never the solution's."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from harness import accuracy, matching, verdicts
from harness.matching import excess, mismatch
from harness.measure import anticheat, kernelbench, worker
from harness.measure.checking import harness_run
from harness.verdicts import HarnessError

CPU = torch.device("cpu")


def test_blocks_cover_every_element_once_in_order_whatever_the_shape() -> None:
    assert list(accuracy.blocks((), 4)) == [()]
    for shape in [(0,), (5,), (3, 0, 2), (4, 5), (2, 3, 7), (1, 1, 40)]:
        x = torch.arange(torch.Size(shape).numel()).reshape(shape)
        seen = [x[i].flatten() for i in accuracy.blocks(shape, 4)]
        assert torch.equal(torch.cat(seen) if seen else x.flatten(), x.flatten())
        assert all(x[i].numel() <= 4 or len(i) == x.dim() for i in accuracy.blocks(shape, 4))


@pytest.fixture
def tiny_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 7 elements, and the median of a sample above 50: every path in blocks."""
    monkeypatch.setattr(accuracy, "BLOCK_ELEMENTS", 7)
    monkeypatch.setattr(accuracy, "MEDIAN_ELEMENTS", 50)


def reports() -> list[Any]:
    """What the comparisons say on a few awkward pairs (views, NaN, integers, a scalar)."""
    torch.manual_seed(0)
    expected = torch.randn(6, 9, 5)
    actual = expected.clone()
    actual[1, 2, 3] += 1.0
    actual[4, 8, 0] = float("nan")
    actual[5, 0, 4] *= 1.01
    view_e, view_a = expected.transpose(0, 2), actual.transpose(0, 2)
    ints = torch.arange(100).reshape(10, 10)
    model = torch.nn.Linear(9, 5)
    x = torch.randn(30, 9)
    wanted = model(x).detach()
    return [
        mismatch(expected, actual),
        mismatch(view_e, view_a),
        mismatch(ints, ints + (ints == 57)),
        mismatch(torch.tensor(1.0), torch.tensor(1.5)),
        mismatch(wanted, wanted * (1 + 1e-3), exact=accuracy.Exact(model, [x], CPU)),
        kernelbench.mismatch(expected, actual),
        excess(expected, expected + 1e-5),
        anticheat.fingerprint(expected),
        anticheat.element_fingerprint(view_a),
        anticheat.same_bytes(expected, actual),
        anticheat.poison_note(torch.full((40,), -1, dtype=torch.int32)),
    ]


def test_every_report_is_the_same_a_block_at_a_time(tiny_blocks: None) -> None:
    small = reports()
    assert small[0] and "3 of 270 elements differ" in small[0] and "first: [1, 2, 3]" in small[0]
    assert "[0, 8, 4] expected" in small[1]  # positions in the view's own coordinates
    assert small[4] and "against float64 at [" in small[4]
    assert small[6] == pytest.approx(0.1, rel=0.2)  # 1e-5 against atol + rtol |x| ~ 1e-4


def test_the_reports_match_those_made_on_whole_tensors(
    tiny_blocks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    small = reports()
    monkeypatch.setattr(accuracy, "BLOCK_ELEMENTS", 1 << 24)
    monkeypatch.setattr(accuracy, "MEDIAN_ELEMENTS", 1 << 26)
    whole = reports()
    # The accuracy rule's typical error is the median of a sample with small blocks: only its
    # printed figure may move.
    assert [r for i, r in enumerate(small) if i != 4] == [r for i, r in enumerate(whole) if i != 4]
    assert small[4].split("(typically")[0] == whole[4].split("(typically")[0]


def test_a_draw_is_folded_into_the_spread_and_held_no_longer() -> None:
    torch.manual_seed(0)
    model, x = torch.nn.Linear(64, 8), torch.randn(4, 64)
    answer = accuracy.Exact(model, [x], CPU)()
    assert answer.drawn == accuracy.DRAWS and not hasattr(answer, "draws")
    pair = accuracy.fold(
        None, (answer.value, 3.0), (answer.value.float(), 2.5), (answer.value, 3.0)
    )
    assert pair[0].abs().max() > 0 and pair[1].item() == 0.5


def test_the_harness_failing_to_compare_is_a_harness_error_never_the_solutions() -> None:
    def out_of_memory(expected: Any, actual: Any) -> str | None:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 40.00 GiB")

    with pytest.raises(HarnessError, match="comparison of the outputs failed: OutOfMemoryError"):
        harness_run(out_of_memory)(torch.ones(1), torch.ones(1))
    judged = worker._blame(HarnessError("the harness's comparison failed"), __file__, True)
    assert judged.harness_error and judged.status == verdicts.RUNTIME_ERROR

    def illegal_address(expected: Any, actual: Any) -> str | None:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    with pytest.raises(RuntimeError, match="illegal memory access"):  # the solution's fault
        harness_run(illegal_address)(torch.ones(1), torch.ones(1))


def test_the_tally_names_the_largest_errors_over_all_blocks(tiny_blocks: None) -> None:
    expected = torch.zeros(100)
    actual = expected.clone()
    actual[3], actual[97] = 0.5, 2.0
    report = matching.mismatch(expected, actual) or ""
    assert "2 of 100 elements differ" in report and "max abs err 2" in report


def test_the_typical_errors_sample_holds_no_block_whole(
    tiny_blocks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above MEDIAN_ELEMENTS the median comes from a sample of each block: copies, so that no
    block's whole scale stays alive (found on the H200: views kept 43 GiB for 5.4e9 elements)."""
    pieces: list[torch.Tensor] = []
    cat = torch.cat

    def spy(tensors: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        pieces.extend(tensors)
        return cat(tensors, *args, **kwargs)

    monkeypatch.setattr(torch, "cat", spy)
    expected = torch.randn(1000)
    accuracy.Rule(expected, expected, expected.double(), None)
    assert pieces and sum(p.numel() for p in pieces) <= 1000 // 20 + len(pieces)
    assert all(p.untyped_storage().nbytes() == 8 * p.numel() for p in pieces)
