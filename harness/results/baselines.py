"""The torch.compile baseline: measured once per GPU model, torch version, reference and shape,
then reused from `<results>/<machine>/baselines.jsonl`.

Compiling takes tens of seconds per shape, so the baseline is timed by a worker of its own
(compile time kept out of the samples) and cached; each solution's row then carries the
compiled reference's median and the speedup over it, an unpaired ratio with its interval, and
says whether the baseline came from the cache. A compiled reference whose output differs from
eager PyTorch's is recorded with the difference and gives no speedup. Eager PyTorch is never
cached: it is timed side by side with every solution, which is what makes that speedup paired.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness import files, stats

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


def attach(bench: dict[str, Any], entries: list[dict[str, Any]], run_id: str) -> None:
    """Add `compile` and `vs_compile` to a solution's benchmark row from the newest matching
    baseline entry; leave the row as it is when there is none."""
    matching = [
        e
        for e in entries
        if e.get("name") == bench["name"]
        and e.get("inputs") == bench.get("inputs")
        and e.get("mode") == bench.get("mode")
    ]
    if not matching:
        return
    entry = matching[-1]
    compiled = entry["compiled"]
    bench["compile"] = {
        "median_us": compiled["median_us"],
        "median_low_us": compiled.get("median_low_us"),
        "median_high_us": compiled.get("median_high_us"),
        "compile_s": entry.get("compile_s"),
        "cached": entry.get("run_id") != run_id,
        "measured_at": entry.get("time"),
        "mismatch": entry.get("mismatch"),
    }
    if entry.get("mismatch"):  # a wrong answer is no baseline: no speedup over it
        return
    ratio = stats.unpaired_ratio(compiled["times_us"], bench["solution"]["times_us"])
    bench["vs_compile"] = ratio.to_dict()
