"""The side-by-side script's choice of pairs (its KernelBench steps need a GPU)."""

from pathlib import Path

from scripts import kernelbench_side_by_side as side_by_side


def test_only_and_shard_split_a_level_between_processes(tmp_path: Path) -> None:
    for n in (1, 2, 3, 10, 11, 31):
        (tmp_path / f"{n}_Problem.py").write_text("")
    chosen = lambda only, shard: [  # noqa: E731
        side_by_side.number(p.name) for p in side_by_side.chosen(tmp_path, only, shard)
    ]
    assert chosen(None, None) == [1, 2, 3, 10, 11, 31]  # in number order, not name order
    assert chosen("3,11,31,99", None) == [3, 11, 31]
    shards = [chosen("2,3,10,11,31", f"{k}/2") for k in range(2)]
    assert shards == [[2, 10, 31], [3, 11]]
