"""Render result tables from recorded runs; reads only the records, so it works without a GPU.

A problem's table holds the latest record of each solution (by path), one row per benchmark,
or one row carrying the verdict where the solution did not reach timing.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pandas as pd
from tabulate import tabulate

from harness import files
from harness.stats import Interval

NOTES_CHARS = 160  # a markdown cell longer than this is cut; the CSV keeps it whole
NOISY_RSE = 0.01  # a side whose relative standard error ends above this is marked noisy
COLUMNS = {  # column: header in the markdown table
    "solution": "solution",
    "shape": "shape",
    "status": "status",
    "median_us": "time (us)",
    "iqr_pct": "IQR",
    "n": "n",
    "ref_median_us": "eager (us)",
    "speedup": "speedup [95% CI]",
    "vs_compile": "vs compile",
    "gbps": "GB/s",
    "ceiling_pct": "of copy",
    "when": "run (UTC)",
    "notes": "notes",  # detail, flags and log, see notes()
}

CSV_COLUMNS = [c for c in COLUMNS if c not in ("notes", "speedup", "vs_compile")] + [
    "speedup",
    "speedup_low",
    "speedup_high",
    "vs_compile",
    "vs_compile_low",
    "vs_compile_high",
    "compile_median_us",
    "compile_cached",
    "compile_mismatch",
    "ref_iqr_pct",
    "rse",
    "ref_rse",
    "stop",
    "mode",
    "floor_us",
    "launch_bound",
    "bytes",
    "flops",
    "tflops",
    "sm_mhz",
    "temp_c",
    "throttled_samples",
    "flags",
    "detail",
    "warnings",
    "log",
    "solution_path",
    "run_id",
]


def latest_per_solution(all_records: list[dict[str, Any]], problem: str) -> list[dict[str, Any]]:
    """The newest record of each solution (keyed by path) of `problem`, sorted by name."""
    latest: dict[str, dict[str, Any]] = {}
    for record in all_records:
        if record.get("problem") == problem:
            latest[record["solution_path"]] = record
    return sorted(latest.values(), key=lambda r: r["solution"])


def table_rows(problem_records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (solution, benchmark); a solution that did not reach timing gets one row."""
    stems = [record["solution"] for record in problem_records]
    rows = []
    for record in problem_records:
        # Two files of the same name from different folders are told apart by their paths.
        unique = stems.count(record["solution"]) == 1
        base = {
            "solution": record["solution"] if unique else record["solution_path"],
            "status": record["status"],
            "when": _short_time(record.get("time")),
            "detail": record.get("detail") or _device_note(record),
            "warnings": "; ".join(record.get("warnings") or []),
            "log": record.get("log"),
            "solution_path": record["solution_path"],
            "run_id": record.get("run_id"),
        }
        benchmarks = record.get("benchmarks") or []
        if not benchmarks:
            rows.append({**base, "shape": "-"})
        for bench in benchmarks:
            ceiling = record.get("ceiling") if record.get("device") != "cpu" else None
            rows.append({**base, **_timing_columns(bench, ceiling)})
    return rows


def _timing_columns(bench: dict[str, Any], ceiling: dict[str, Any] | None) -> dict[str, Any]:
    solution, reference = bench["solution"], bench["reference"]
    speedup = bench_speedup(bench)
    columns: dict[str, Any] = {
        "shape": bench_label(bench),
        "median_us": solution["median_us"],
        "iqr_pct": 100 * solution["iqr_us"] / solution["median_us"],
        "n": solution["count"],
        "ref_median_us": reference["median_us"],
        "ref_iqr_pct": 100 * reference["iqr_us"] / reference["median_us"],
        "speedup": speedup.value,
        "speedup_low": speedup.low if bench.get("speedup") else None,
        "speedup_high": speedup.high if bench.get("speedup") else None,
        "rse": solution.get("rse"),
        "ref_rse": reference.get("rse"),
        "stop": bench.get("stop"),
        "mode": bench.get("mode"),
        "floor_us": bench.get("floor_us"),
        "launch_bound": bench.get("launch_bound"),
        "bytes": bench.get("bytes"),
        "flops": bench.get("flops"),
    }
    columns.update(_roofline_columns(bench, ceiling))
    columns.update(_compile_columns(bench))
    columns.update(_state_columns(bench.get("state")))
    columns["flags"] = "; ".join(flags(bench, columns))
    return columns


def _roofline_columns(bench: dict[str, Any], ceiling: dict[str, Any] | None) -> dict[str, Any]:
    median_us = bench["solution"]["median_us"]
    gbps = bench["bytes"] / median_us / 1e3 if bench.get("bytes") else None
    tflops = bench["flops"] / median_us / 1e6 if bench.get("flops") else None
    copy = (ceiling or {}).get("copy_gbps")
    return {
        "gbps": gbps,
        "tflops": tflops,
        "ceiling_pct": 100 * gbps / copy if gbps and copy else None,
    }


def _compile_columns(bench: dict[str, Any]) -> dict[str, Any]:
    versus, compiled = bench_vs_compile(bench), bench.get("compile")
    if not compiled:
        return {}
    if not versus:
        return {
            "compile_median_us": compiled["median_us"],
            "compile_mismatch": compiled["mismatch"],
        }
    return {
        "vs_compile": versus.value,
        "vs_compile_low": versus.low,
        "vs_compile_high": versus.high,
        "compile_median_us": compiled["median_us"],
        "compile_cached": compiled.get("cached"),
    }


def _state_columns(state: dict[str, Any] | None) -> dict[str, Any]:
    if not state:
        return {}
    return {
        "sm_mhz": "-".join(str(v) for v in sorted(set(state["sm_mhz"]))),
        "temp_c": "-".join(str(v) for v in sorted(set(state["temp_c"]))),
        "throttled_samples": state["throttled_samples"],
    }


def flags(bench: dict[str, Any], columns: dict[str, Any]) -> list[str]:
    """What a reader must know before trusting the row's numbers."""
    found = []
    if columns.get("ceiling_pct") and columns["ceiling_pct"] > 100:
        found.append(
            f"ABOVE the copy ceiling ({columns['ceiling_pct']:.0f}%): a warm cache, a wrong "
            "byte count, or skipped work"
        )
    if bench.get("launch_bound"):
        found.append(f"launch-bound (floor {bench['floor_us']:.1f} us; try --graph)")
    for side in ("solution", "reference"):
        rse = bench[side].get("rse")
        if rse is not None and rse > NOISY_RSE:
            found.append(f"noisy {side} (RSE {100 * rse:.1f}%, stopped by {bench.get('stop')})")
    if columns.get("throttled_samples"):
        reasons = ", ".join(bench["state"].get("reasons") or [])
        found.append(f"throttled: {columns['throttled_samples']} samples ({reasons})")
    if bench.get("note"):
        found.append(bench["note"])
    if (bench.get("compile") or {}).get("mismatch"):
        found.append("torch.compile's output differs from eager's: no 'vs compile'")
    return found


def bench_speedup(bench: dict[str, Any]) -> Interval:
    """A benchmark's speedup over eager PyTorch with its interval.

    Records since the paired sampler carry `speedup` (median of per-round ratios, 95% interval);
    older records give only the two medians, so their interval is the point itself.
    """
    if bench.get("speedup"):
        return Interval(**bench["speedup"])
    ratio = bench["reference"]["median_us"] / bench["solution"]["median_us"]
    return Interval(ratio, ratio, ratio)


def bench_vs_compile(bench: dict[str, Any]) -> Interval | None:
    """The speedup over the torch.compile'd reference, or None: not measured, or the compiled
    reference gave a different answer from eager (then it is no baseline)."""
    if not bench.get("vs_compile") or (bench.get("compile") or {}).get("mismatch"):
        return None
    return Interval(**bench["vs_compile"])


def bench_label(bench: dict[str, Any]) -> str:
    """'512x1024' for the default benchmark (its first tensor's shape), else its own name."""
    if bench["name"] != "default":
        return str(bench["name"])
    for described in bench.get("inputs", []):
        if "[" in described:
            return described.split("[", 1)[1].rstrip("]").replace(",", "x") or "scalar"
    return "default"


def _device_note(record: dict[str, Any]) -> str:
    ran_on = record.get("device", "")
    if ran_on == "cpu" and record.get("machine", {}).get("gpu"):
        return "C++ solution: checked and timed on the CPU, against the reference on the CPU"
    return ""


def notes(row: dict[str, Any]) -> str:
    """The flags and the detail, cut to NOTES_CHARS, and the log's path where it failed."""
    text = "; ".join(t for t in (row.get("flags"), row.get("detail"), row.get("warnings")) if t)
    if len(text) > NOTES_CHARS:
        text = text[: NOTES_CHARS - 3].rstrip() + "..."
    if row["status"] != "ok" and row.get("log"):
        text = f"{text} (log: {row['log']})" if text else f"log: {row['log']}"
    return text


def _short_time(stamp: str | None) -> str:
    if not stamp:
        return ""
    moment = datetime.datetime.fromisoformat(stamp).astimezone(datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M")


def markdown_table(rows: list[dict[str, Any]]) -> str:
    shown = [[_format(column, row.get(column)) for column in COLUMNS] for row in rows]
    ratio_at = {c: list(COLUMNS).index(c) for c in ("speedup", "vs_compile")}
    for line, row in zip(shown, rows, strict=True):
        line[-1] = notes(row)
        for column, at in ratio_at.items():
            line[at] = _ratio_cell(row, column)
    return tabulate(shown, headers=list(COLUMNS.values()), tablefmt="github", disable_numparse=True)


def _format(column: str, value: Any) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return ""
    if column in ("median_us", "ref_median_us"):
        return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 1000 else f"{value:,.0f}"
    if column == "iqr_pct":
        return f"{value:.1f}%"
    if column == "gbps":
        return f"{value:,.0f}"
    if column == "ceiling_pct":
        return f"{value:.0f}%" + (" (!)" if value > 100 else "")
    return str(value)


def _ratio_cell(row: dict[str, Any], column: str) -> str:
    """'2.08x [2.05, 2.11]', or '2.08x' where no interval was recorded; '*' marks a cached
    compile baseline."""
    value = row.get(column)
    if column == "vs_compile" and row.get("compile_mismatch"):
        return "wrong answer"
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return ""
    low, high = row.get(f"{column}_low"), row.get(f"{column}_high")
    cell = f"{value:.2f}x" + (f" [{low:.2f}, {high:.2f}]" if low is not None else "")
    return cell + ("*" if column == "vs_compile" and row.get("compile_cached") else "")


def render_markdown(
    problem: str, rows: list[dict[str, Any]], newest: dict[str, Any], chart: str | None = None
) -> str:
    machine = newest.get("machine", {})
    where = machine.get("gpu") or f"CPU ({machine.get('cpu')})"
    env = ", ".join(
        f"{key} {machine[key]}"
        for key in ("torch", "cuda", "driver", "commit")
        if machine.get(key) is not None
    )
    picture = f"![speedup per solution and shape]({chart})\n\n" if chart else ""
    return (
        f"# {problem} on {where}\n\n"
        f"Latest result of each solution. {_method(newest)}\n\n"
        f"{markdown_table(rows)}\n\n{picture}"
        f"Newest run started {machine.get('time')}, {env}. Raw samples: `{files.LOG_NAME}`.\n"
    )


def _method(newest: dict[str, Any]) -> str:
    """How to read the table, from the newest record's settings."""
    if not newest.get("machine", {}).get("gpu"):
        how = "a wall clock around each call, caches not flushed"
    elif (newest.get("settings") or {}).get("graph"):
        how = "CUDA-graph replays over input sets larger than twice the L2, per call"
    elif (newest.get("settings") or {}).get("flush") == "write":
        how = "CUDA events around each call; before each, L2 flushed by writing a 2x L2 buffer "
        how += "(dirty lines, as triton's do_bench) and host time hidden"
    else:
        how = "CUDA events around each call; before each, L2 flushed by reading a 2x L2 "
        how += "buffer (clean lines) and host time hidden"
    text = (
        f"Times are medians ({how}); IQR is the interquartile range as a share of the median; "
        "n is the number of samples the stopping rule took (`python run.py -h`). The solution "
        "and eager PyTorch are timed in alternating rounds in one process; speedup is the "
        "median of the per-round ratios, with its 95% interval. "
    )
    ceiling = newest.get("ceiling")
    if ceiling:
        text += (
            f"GB/s is the bytes the problem must move over the median time; 'of copy' is its "
            f"share of this GPU's copy bandwidth, {ceiling['copy_gbps']:,.0f} GB/s (measured "
            f"{ceiling.get('measured', '')[:10]}, `ceiling.json`). "
        )
    return text + (
        "'vs compile' is the speedup over the reference under torch.compile (compile time "
        "excluded; * = a baseline cached from an earlier run, `baselines.jsonl`)."
    )


def write_tables(folder: Path, problem: str, chart: str | None = None) -> tuple[Path, Path]:
    """Re-render `<problem>.md` and `.csv` in `folder` from its run log; returns both paths.
    `chart`, a file name beside them, is shown under the table."""
    with files.locked(folder):
        problem_records = latest_per_solution(files.read(folder), problem)
        rows = table_rows(problem_records)
        newest = max(problem_records, key=lambda r: r.get("time", ""), default={})
        markdown = render_markdown(problem, rows, newest, chart)
        frame = pd.DataFrame(rows, columns=CSV_COLUMNS)
        md_path, csv_path = folder / f"{problem}.md", folder / f"{problem}.csv"
        files.write_atomic(md_path, markdown)
        files.write_atomic(csv_path, frame.to_csv(index=False, float_format="%.6g"))
    return md_path, csv_path
