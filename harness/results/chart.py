"""Draw a problem's speedups as an SVG chart beside its tables, from the records alone.

One horizontal bar per (solution, shape) of the latest ok record of each solution, drawn from
1x to the speedup over eager PyTorch on a log axis, with the 95% interval as an error bar.
The SVG is deterministic (no date, fixed id salt, text kept as text), so an unchanged chart
rewrites to the same bytes and diffs stay quiet. matplotlib is optional: without it, no chart.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import codec, verdicts
from harness.record import RunRecord
from harness.results import report
from harness.results.summary import CPU_MARK, ran_on_cpu_beside_gpu

HASH_SALT = "kernel-bench"  # fixes the ids matplotlib puts in the SVG
BAR_HEIGHT_IN = 0.32  # figure inches per bar
MARGIN_IN = 1.4  # figure inches for title and axis


@dataclass(frozen=True)
class Bar:
    """One bar of a chart: a solution's speedup on one shape, with its 95% interval."""

    label: str
    shape: str
    value: float
    low: float
    high: float


def chart_bars(problem_records: list[RunRecord]) -> list[Bar]:
    """One bar per (solution, shape) of the ok records."""
    bars = []
    for record in problem_records:
        if record.status != verdicts.OK:
            continue
        mark = CPU_MARK if ran_on_cpu_beside_gpu(record) else ""
        for bench in record.benchmarks:
            speedup = report.bench_speedup(bench)
            shape = report.bench_label(bench)
            bars.append(
                Bar(
                    label=f"{record.solution}{mark}  {shape}",
                    shape=shape,
                    value=speedup.value,
                    low=min(speedup.low, speedup.value),
                    high=max(speedup.high, speedup.value),
                )
            )
    return bars


def render_svg(problem: str, gpu: str, bars: list[Bar]) -> str:
    """The chart as SVG text; raises ImportError without matplotlib."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    with matplotlib.rc_context({"svg.hashsalt": HASH_SALT, "svg.fonttype": "none"}):
        figure = Figure(figsize=(8, MARGIN_IN + BAR_HEIGHT_IN * len(bars)))
        FigureCanvasAgg(figure)
        _draw(figure.add_subplot(), problem, gpu, bars)
        figure.tight_layout()
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    return buffer.getvalue()


def _draw(axes: Any, problem: str, gpu: str, bars: list[Bar]) -> None:
    """Bars from 1x to each speedup (first at the top), interval whiskers, a line at 1x."""
    shapes = list(dict.fromkeys(bar.shape for bar in bars))
    colours = [f"C{shapes.index(bar.shape) % 10}" for bar in bars]
    ys = list(range(len(bars)))
    values = [bar.value for bar in bars]
    errors = [[bar.value - bar.low for bar in bars], [bar.high - bar.value for bar in bars]]
    axes.barh(ys, [v - 1 for v in values], left=1, color=colours, height=0.7)
    axes.errorbar(values, ys, xerr=errors, fmt="none", ecolor="black", capsize=3, linewidth=1)
    for y, value in zip(ys, values, strict=True):
        axes.annotate(
            f"{value:.2f}x", (value, y), xytext=(4, 4), textcoords="offset points", fontsize=8
        )
    axes.axvline(1, color="black", linewidth=1)
    axes.set_xscale("log")
    axes.xaxis.set_major_formatter(lambda value, _: f"{value:g}x")
    lows, highs = [bar.low for bar in bars], [bar.high for bar in bars]
    axes.set_xlim(min(*lows, 1) / 1.5, max(*highs, 1) * 1.5)
    axes.set_yticks(ys, [bar.label for bar in bars])
    axes.invert_yaxis()
    axes.set_xlabel("speedup over eager PyTorch (log scale; whiskers: 95% interval)")
    axes.set_title(f"{problem} on {gpu}")
    axes.grid(axis="x", which="both", alpha=0.3)


def write_chart(folder: Path, problem: str, records: list[RunRecord]) -> Path | None:
    """Re-draw `<problem>.svg` in `folder` from `records` (its run log, as harness.record.read
    gives it); returns its path. The caller holds the folder's lock (`render_problem`).

    None, writing nothing, when matplotlib is missing or no solution of `problem` is ok (then
    a chart drawn before, which would show solutions no longer ok or forgotten, is removed).
    """
    problem_records = report.latest_per_solution(records, problem)
    bars = chart_bars(problem_records)
    newest = report.newest(problem_records)
    path = folder / f"{problem}.svg"
    if not bars or newest is None:
        path.unlink(missing_ok=True)
        return None
    try:
        svg = render_svg(problem, newest.machine.gpu or "CPU", bars)
    except ImportError:
        return None
    codec.write_atomic(path, svg)
    return path
