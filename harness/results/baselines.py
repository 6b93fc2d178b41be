"""The torch.compile baseline: measured once per GPU model, torch version, reference and shape,
then reused from `<results>/<machine>/baselines.jsonl`.

Compiling takes tens of seconds per shape, so the baseline is timed by a worker of its own
(compile time kept out of the samples) and cached. When a solution's record is built, `versus`
gives each of its rows the compiled reference's median and the speedup over it, an unpaired
ratio with its interval, and says whether the baseline came from the cache. A compiled
reference whose output differs from eager PyTorch's is recorded with the difference and gives
no speedup. Eager PyTorch is never cached: it is timed side by side with every solution, which
is what makes that speedup paired.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness import codec, files, stats
from harness.record import BenchRow, CompileBaseline, Measurement
from harness.stats import Interval

LOG_NAME = "baselines.jsonl"


def cached(folder: Path, wanted: dict[str, Any]) -> list[dict[str, Any]]:
    """Recorded baselines of `wanted`'s problem, reference, GPU, torch and mode, newest last."""
    fields = ("problem", "reference_hash", "mode", "gpu", "torch")
    return [
        entry
        for entry in files.read(folder, LOG_NAME)
        if all(str(entry.get(f)) == str(wanted.get(f)) for f in fields)
        and entry.get("flush", "read") == wanted.get("flush", "read")
    ]


def store(folder: Path, context: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """Append each benchmark row of a baseline job, with `context` (the key and the run)."""
    for row in rows:
        files.append(folder, {**context, **row}, LOG_NAME)  # the row's own mode wins


def versus(
    row: BenchRow, entries: list[dict[str, Any]], run_id: str
) -> tuple[CompileBaseline | None, Interval | None]:
    """The compile baseline of a solution's benchmark row, from the newest entry of the same
    shape and timer, and the row's speedup over it; (None, None) when there is none, and no
    speedup over a compiled reference that gave a wrong answer. `run_id` is this run's, so a
    baseline measured by an earlier run reads as cached."""
    matching = [
        e
        for e in entries
        if e.get("name") == row.name
        and tuple(e.get("inputs") or ()) == row.inputs
        and e.get("mode") == row.mode
    ]
    if not matching:
        return None, None
    entry = matching[-1]
    compiled = codec.decode(Measurement, entry["compiled"])
    interval = compiled.interval
    baseline = CompileBaseline(
        median_us=compiled.median_us,
        median_low_us=interval.low,
        median_high_us=interval.high,
        compile_s=entry.get("compile_s"),
        cached=entry.get("run_id") != run_id,
        measured_at=entry.get("time"),
        mismatch=entry.get("mismatch"),
    )
    if baseline.mismatch:  # a wrong answer is no baseline: no speedup over it
        return baseline, None
    return baseline, stats.unpaired_ratio(compiled.times_us, row.solution.times_us)
