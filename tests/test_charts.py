"""Speedup charts: an SVG per problem from the ok records, deterministic, optional."""

import sys
from pathlib import Path

import pytest

from harness import record as run_log
from harness.results import chart
from tests.records_factory import bench, record

pytest.importorskip("matplotlib")


def fill(folder: Path) -> None:
    run_log.append(folder, record("p", "quick_cuda", [bench(10, 30), bench(50, 100, "big")]))
    run_log.append(folder, record("p", "old_format", [bench(10, 15, new_format=False)]))
    # A failed solution's timings (say, from before a later check failed) are never drawn.
    run_log.append(folder, record("p", "wrong_cuda", [bench(1, 30)], status="incorrect"))


def test_chart_is_an_svg_of_the_ok_solutions(tmp_path: Path) -> None:
    fill(tmp_path)
    path = chart.write_chart(tmp_path, "p", run_log.read(tmp_path))
    assert path == tmp_path / "p.svg"
    text = path.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text and text.rstrip().endswith("</svg>")
    assert "quick_cuda  512x1024" in text and "quick_cuda  big" in text and "old_format" in text
    assert "wrong_cuda" not in text
    assert "p on NVIDIA H200" in text and "3.00x" in text


def test_chart_bars_carry_the_interval() -> None:
    bars = chart.chart_bars([record("p", "a", [bench(10, 30)])])
    assert [(b.label, b.value) for b in bars] == [("a  512x1024", 3.0)]
    assert bars[0].low == pytest.approx(3.0 * 0.98) and bars[0].high == pytest.approx(3.06)


def test_chart_is_deterministic(tmp_path: Path) -> None:
    fill(tmp_path)
    records = run_log.read(tmp_path)
    first = chart.write_chart(tmp_path, "p", records)
    assert first is not None
    before = first.read_bytes()
    chart.write_chart(tmp_path, "p", records)
    assert first.read_bytes() == before
    assert b"<dc:date>" not in before


def test_no_chart_without_ok_rows(tmp_path: Path) -> None:
    records = [record("p", "wrong_cuda", status="incorrect")]
    assert chart.write_chart(tmp_path, "p", records) is None
    assert chart.write_chart(tmp_path, "no_such_problem", records) is None
    assert not list(tmp_path.glob("*.svg"))


def test_no_chart_without_matplotlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fill(tmp_path)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    assert chart.write_chart(tmp_path, "p", run_log.read(tmp_path)) is None
    assert not (tmp_path / "p.svg").exists()
