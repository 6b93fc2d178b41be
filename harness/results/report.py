"""Render result tables from recorded runs; reads only the records, so it works without a GPU.

A problem's table holds the latest record of each solution (by path), one row per benchmark,
or one row carrying the verdict where the solution did not reach timing.

Which records a table, chart or summary shows: the newest of each solution, except that a run
which passed without timing (--check-only, a replay) never hides the timed record of the same
code before it.

The flags of a table's row: what a reader must know before trusting its numbers (a warm
cache, skipped work, noise, throttling, a machine's load, a host-bound side, ...). A problem
table's columns are `TableRow`'s fields, each declared once with its markdown heading and
whether the CSV has it; `MARKDOWN` orders the table's, and `table_rows` fills the rows.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import pandas as pd
from tabulate import tabulate

from harness import codec, stats, verdicts
from harness.record import LOG_NAME, BenchRow, Ceiling, GpuState, Machine, RunRecord
from harness.results import baselines, load
from harness.results.sol import reached_at, side_time, sol_us
from harness.settings import KERNELBENCH
from harness.stats import Interval

NOTES_CHARS = 160  # a markdown cell longer than this is cut; the CSV keeps it whole
NO_LOAD = load.Load(None, None, None, cpu_timed=False)  # a load not shown: no columns, no flag


def table_rows(problem_records: list[RunRecord]) -> list[TableRow]:
    """One row per (solution, benchmark); a solution that did not reach timing gets one row."""
    stems = [record.solution for record in problem_records]
    rows = []
    for record in problem_records:
        # Two files of the same name from different folders are told apart by their paths.
        unique = stems.count(record.solution) == 1
        base = _record_row(record, record.solution if unique else record.solution_path)
        if not record.benchmarks:
            rows.append(base)
        ceiling = record.ceiling if record.device != "cpu" else None
        busy = load.columns(record)
        rows += [_timing_row(base, bench, ceiling, busy) for bench in record.benchmarks]
    return rows


def bench_row(record: RunRecord, bench: BenchRow) -> TableRow:
    """One benchmark's row as the console shows it: without the copy ceiling and the machine's
    load (and so without their flags)."""
    return _timing_row(_record_row(record, record.solution), bench, None, NO_LOAD)


def _record_row(record: RunRecord, solution: str) -> TableRow:
    """The record's own columns, which each of its rows carries."""
    return TableRow(
        solution=solution,
        status=record.status,
        when=_short_time(record.time),
        detail=record.detail or _device_note(record),
        warnings="; ".join(record.warnings),
        log=record.log,
        solution_path=record.solution_path,
        run_id=record.run_id,
        own_share=record.own_share,
        reference_share=record.reference_share,
        flags="; ".join(weak_flags(record)) or None,
        precision=record.settings.checking.precision,
    )


def weak_flags(record: RunRecord) -> list[str]:
    """A flag for each weakness the problem's audit found (rules.FLAGS' weak_problem)."""
    return [f"weak problem: {finding.check}" for finding in record.weaknesses]


def _timing_row(
    base: TableRow, bench: BenchRow, ceiling: Ceiling | None, busy: load.Load
) -> TableRow:
    """`base` (the record's columns) with one benchmark's, its load's and its flags."""
    solution, reference = bench.solution, bench.reference
    speedup = bench_speedup(bench)
    center = side_time(bench)
    columns: dict[str, Any] = {
        "shape": bench_label(bench),
        "median_us": center(solution),
        "iqr_pct": 100 * solution.iqr_us / solution.median_us,
        "n": solution.count,
        "ref_median_us": center(reference),
        "ref_iqr_pct": 100 * reference.iqr_us / reference.median_us,
        "speedup": speedup.value,
        "speedup_low": speedup.low if bench.speedup else None,
        "speedup_high": speedup.high if bench.speedup else None,
        "rse": solution.rse,
        "ref_rse": reference.rse,
        "stop": bench.stop,
        "mode": bench.mode,
        "floor_us": bench.floor_us,
        "launch_bound": bench.launch_bound,
        "bytes": bench.bytes,
        "flops": bench.flops,
    }
    columns.update(_per_call_columns(bench))
    columns.update(_roofline_columns(bench, ceiling))
    columns.update(baselines.compile_columns(bench))
    columns.update(_sol_columns(bench, ceiling))
    columns.update(_state_columns(bench.state))
    columns.update(_witness_columns(bench))
    row = replace(base, **columns, **asdict(busy))  # the machine's load (harness.results.load)
    found = [*([base.flags] if base.flags else []), *flags(bench, row, speedup)]
    return replace(row, flags="; ".join(found))


def _per_call_columns(bench: BenchRow) -> dict[str, Any]:
    """The per-call times (host included) and their speedup, where the row has them."""
    if not bench.per_call:
        return {}
    speedup = bench.per_call.speedup
    return {
        "per_call_us": bench.per_call.solution.median_us,
        "ref_per_call_us": bench.per_call.reference.median_us,
        "per_call_speedup": speedup.value,
        "per_call_speedup_low": speedup.low,
        "per_call_speedup_high": speedup.high,
        "host_bound": bench.host_bound,
    }


def _roofline_columns(bench: BenchRow, ceiling: Ceiling | None) -> dict[str, Any]:
    median_us = bench.solution.median_us
    gbps = bench.bytes / median_us / 1e3 if bench.bytes else None
    tflops = bench.flops / median_us / 1e6 if bench.flops else None
    copy = ceiling.copy_gbps if ceiling else None
    return {
        "gbps": gbps,
        "tflops": tflops,
        "ceiling_pct": 100 * gbps / copy if gbps and copy else None,
    }


def _sol_columns(bench: BenchRow, ceiling: Ceiling | None) -> dict[str, Any]:
    """T_SOL, the share of it the solution reaches and its SOL scores against eager and the
    torch.compile'd reference, where the row has a bound."""
    sol, partial = sol_us(bench, ceiling)
    if sol is None:
        return {}
    share, score = reached_at(bench, sol)
    compiled = bench.compile if baselines.bench_vs_compile(bench) else None
    median_us = side_time(bench)(bench.solution)
    versus = stats.sol_score(median_us, compiled.median_us, sol) if compiled else None
    return {
        "sol_us": sol,
        "sol_pct": 100 * share,
        "sol_score": score,
        "sol_score_compile": versus,
        "sol_partial": partial,
    }


def _witness_columns(bench: BenchRow) -> dict[str, Any]:
    """What ncu counted for one call (run.py --ncu), as a share of the problem's minimum."""
    if not bench.witness:
        return {}
    moved = bench.witness.moved
    share = 100 * moved / bench.bytes if bench.bytes else None
    return {"ncu_bytes": moved, "ncu_pct": share, "ncu_kernels": bench.witness.kernels}


def _state_columns(state: GpuState | None) -> dict[str, Any]:
    if not state:
        return {}
    return {
        "sm_mhz": "-".join(str(v) for v in sorted(set(state.sm_mhz))),
        "temp_c": "-".join(str(v) for v in sorted(set(state.temp_c))),
        "throttled_samples": state.throttled_samples,
    }


def bench_speedup(bench: BenchRow) -> Interval:
    """A benchmark's speedup over eager PyTorch with its interval.

    Records since the paired sampler carry `speedup` (median of per-round ratios, 95% interval);
    older records give only the two medians, so their interval is the point itself.
    """
    if bench.speedup:
        return bench.speedup
    ratio = bench.reference.median_us / bench.solution.median_us
    return Interval(ratio, ratio, ratio)


def bench_label(bench: BenchRow) -> str:
    """'512x1024' for the default benchmark (its first tensor's shape), else its own name; a
    backward pass's row keeps its pass after it ('512x1024 backward')."""
    suffix = f" {bench.backward}" if bench.backward else ""
    if bench.name != f"default{suffix}":
        return bench.name
    for described in bench.inputs:
        if "[" in described:
            shape = described.split("[", 1)[1].rstrip("]").replace(",", "x") or "scalar"
            return shape + suffix
    return bench.name


def _device_note(record: RunRecord) -> str:
    if record.device == "cpu" and record.machine.gpu:
        return "C++ solution: checked and timed on the CPU, against the reference on the CPU"
    return ""


def notes(row: TableRow) -> str:
    """The flags and the detail, cut to NOTES_CHARS, and the log's path where it failed."""
    text = "; ".join(t for t in (row.flags, row.detail, row.warnings) if t)
    if len(text) > NOTES_CHARS:
        text = text[: NOTES_CHARS - 3].rstrip() + "..."
    if row.status != verdicts.OK and row.log:
        text = f"{text} (log: {row.log})" if text else f"log: {row.log}"
    return text


def _short_time(stamp: str | None) -> str:
    if not stamp:
        return ""
    moment = datetime.datetime.fromisoformat(stamp).astimezone(datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M")


def markdown_table(rows: list[TableRow]) -> str:
    shown = [[_format(column, getattr(row, column, None)) for column in COLUMNS] for row in rows]
    ratio_at = {c: list(COLUMNS).index(c) for c in ("speedup", "per_call_speedup", "vs_compile")}
    for line, row in zip(shown, rows, strict=True):
        line[-1] = notes(row)
        for column, at in ratio_at.items():
            line[at] = _ratio_cell(vars(row), column)
    return tabulate(shown, headers=list(COLUMNS.values()), tablefmt="github", disable_numparse=True)


def _format(column: str, value: Any) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return ""
    if column in ("median_us", "ref_median_us"):
        return format_us(value)
    if column == "iqr_pct":
        return f"{value:.1f}%"
    if column == "gbps":  # 3 significant digits below 100: a CPU row's 0.4 GB/s is not '0'
        return f"{value:.3g}" if value < 100 else f"{value:,.0f}"
    if column in ("ceiling_pct", "sol_pct"):
        return f"{value:.0f}%" + (" (!)" if value > 100 else "")
    if column == "sol_score":
        return f"{value:.2f}"
    return str(value)


def format_us(value: float) -> str:
    """A time in microseconds as the tables show it: '9.70', '71.1', '14,569'."""
    return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 1000 else f"{value:,.0f}"


def _ratio_cell(row: Mapping[str, Any], column: str) -> str:
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
    problem: str, rows: list[TableRow], latest: RunRecord | None, chart: str | None = None
) -> str:
    """The problem's page; `latest`, the newest record shown, says where and how it ran."""
    machine = latest.machine if latest else Machine()
    where = machine.gpu or f"CPU ({machine.cpu})"
    at = (
        f" at {latest.settings.checking.precision}"
        if latest and latest.settings.checking.precision
        else ""
    )
    env = ", ".join(
        f"{key} {value}"
        for key, value in (
            ("torch", machine.torch),
            ("cuda", machine.cuda),
            ("driver", machine.driver),
            ("commit", machine.commit),
        )
        if value is not None
    )
    picture = f"![speedup per solution and shape]({chart})\n\n" if chart else ""
    return (
        f"# {problem}{at} on {where}\n\n"
        f"{_weak_paragraph(latest)}"
        f"Latest result of each solution. {_method(latest)}\n\n"
        f"{markdown_table(rows)}\n\n{picture}"
        f"Newest run started {machine.time}, {env}. Raw samples: `{LOG_NAME}`.\n"
    )


def _weak_paragraph(latest: RunRecord | None) -> str:
    """What the newest record's audit found weak in the problem, for the top of its page."""
    if latest is None or not latest.weaknesses:
        return ""
    lines = [
        f"- `{finding.check}`"
        + (f" (case {finding.case!r})" if finding.case else "")
        + f": {finding.message}"
        for finding in latest.weaknesses
    ]
    return (
        "**Weak problem**: its audit found that a wrong solution could pass it, so a verdict "
        "here proves less (its rows are flagged; `--strict-audit` refuses such a problem):\n\n"
        + "\n".join(lines)
        + "\n\n"
    )


def _method(latest: RunRecord | None) -> str:
    """How to read the table, from the newest record's settings."""
    if latest is None or not latest.machine.gpu:
        how = "a wall clock around each call, caches not flushed"
    elif latest.settings.timing.graph:
        how = "CUDA-graph replays over input sets larger than twice the L2, per call"
    elif latest.settings.timing.flush == "write":
        how = "CUDA events around each call; before each, L2 flushed by writing a 2x L2 buffer "
        how += "(dirty lines, as triton's do_bench) and host time hidden"
    else:
        how = "CUDA events around each call; before each, L2 flushed by reading a 2x L2 "
        how += "buffer (clean lines) and host time hidden"
    as_kernelbench = latest is not None and latest.settings.checking.profile == KERNELBENCH
    if as_kernelbench and latest is not None and latest.machine.gpu:
        text = (
            "Judged as KernelBench's evaluator judges (`--as kernelbench`): its allclose "
            "criterion, and its timer, CUDA events around one call after a 256 MB fill, each "
            "side on its own. Times are means of 100 calls; speedup is the ratio of the means, "
            "with its 95% interval. "
        )
    else:
        text = (
            "Judged by KernelBench's allclose criterion (`--as kernelbench`); its timer needs a "
            "GPU, so the times are this harness's. "
            if as_kernelbench
            else ""
        )
        text += (
            f"Times are medians ({how}); IQR is the interquartile range as a share of the "
            "median; n is the number of samples the stopping rule took (`python run.py -h`). "
            "The solution and eager PyTorch are timed in alternating rounds in one process; "
            "speedup is the median of the per-round ratios, with its 95% interval. "
        )
    if latest is not None and latest.machine.gpu:
        text += (
            "'per call' is the speedup when each call starts from an idle device, its host "
            "time included (what a caller that waits for each result pays); a row whose two "
            "speedups part by more than 10% names the host-bound side. "
        )
    ceiling = latest.ceiling if latest else None
    if ceiling:
        text += (
            f"GB/s is the bytes the problem must move over the median time; 'of copy' is its "
            f"share of this GPU's copy bandwidth, {ceiling.copy_gbps:,.0f} GB/s (measured "
            f"{(ceiling.measured or '')[:10]}, `ceiling.json`). "
        )
    return text + (
        "'vs compile' is the speedup over the reference under torch.compile (compile time "
        "excluded; * = a baseline cached from an earlier run, `baselines.jsonl`)."
    )


def write_tables(
    folder: Path, problem: str, records: list[RunRecord], chart: str | None = None
) -> tuple[Path, Path]:
    """Re-render `<problem>.md` and `.csv` in `folder` from `records` (its run log, as
    harness.record.read gives it); returns both paths. `chart`, a file name beside them, is
    shown under the table. The caller holds the folder's lock (harness.results.summary)."""
    problem_records = latest_per_solution(records, problem)
    rows = table_rows(problem_records)
    markdown = render_markdown(problem, rows, newest(problem_records), chart)
    frame = pd.DataFrame([vars(row) for row in rows], columns=CSV_COLUMNS)
    md_path, csv_path = folder / f"{problem}.md", folder / f"{problem}.csv"
    codec.write_atomic(md_path, markdown)
    codec.write_atomic(csv_path, frame.to_csv(index=False, float_format="%.6g"))
    return md_path, csv_path


def latest_per_solution(all_records: list[RunRecord], problem: str) -> list[RunRecord]:
    """The newest record of each solution (keyed by path) of `problem`, sorted by name. A run
    that passed without timing (--check-only, a replay) never hides the timed record of the
    same solution and reference before it: that record stays the solution's row."""
    latest: dict[str, RunRecord] = {}
    for record in all_records:
        if record.problem != problem:
            continue
        kept = latest.get(record.solution_path)
        if kept is not None and kept.benchmarks and _passed_untimed(record, kept):
            continue
        latest[record.solution_path] = record
    return sorted(latest.values(), key=lambda r: r.solution)


def _passed_untimed(record: RunRecord, timed: RunRecord) -> bool:
    """Whether `record` passed without timing the code `timed` timed (same sources)."""
    same = (record.solution_hash, record.reference_hash) == (
        timed.solution_hash,
        timed.reference_hash,
    )
    return record.status == verdicts.OK and not record.benchmarks and same


def newest(records: list[RunRecord]) -> RunRecord | None:
    """The record made last, or None when there is none."""
    return max(records, key=lambda r: r.time, default=None)


NOISY_RSE = 0.01  # a side whose relative standard error ends above this is marked noisy
WITNESS_MIN_SHARE = 0.9  # a call that moves less than this share of the minimum is flagged


def flags(bench: BenchRow, row: TableRow, speedup: Interval) -> list[str]:
    """What a reader must know before trusting the benchmark's numbers; `row` is its table row,
    `speedup` its device speedup."""
    found = []
    witnessed = row.ncu_pct
    if witnessed is not None and witnessed < 100 * WITNESS_MIN_SHARE:
        found.append(
            f"MOVED {witnessed:.0f}% of the problem's minimum bytes under ncu: skipped work, "
            "or a wrong byte count"
        )
    if row.sol_pct and row.sol_pct > 100 and row.sol_us is not None:
        found.append(
            f"BELOW the speed of light ({row.sol_us:.1f} us; {row.sol_pct:.0f}% of it): skipped "
            "work, a warm cache, or a lower precision than the reference's"
        )
    if row.sol_partial:
        found.append(f"SOL bound partial: {row.sol_partial}")
    if row.sol_us is not None and row.sol_score is None and row.ref_median_us is not None:
        eager = f"eager PyTorch ({format_us(row.ref_median_us)} us) is not slower than"
        found.append(f"no SOL score: {eager} the speed of light ({format_us(row.sol_us)} us)")
    if row.ceiling_pct and row.ceiling_pct > 100:
        found.append(
            f"ABOVE the copy ceiling ({row.ceiling_pct:.0f}%): a warm cache, a wrong "
            "byte count, or skipped work"
        )
    for side, timing in (("solution", bench.solution), ("reference", bench.reference)):
        if timing.synchronizes:
            found.append(
                f"{side} synchronizes with the device (timed with its synchronisation, as a "
                "loop of such calls runs)"
            )
    if bench.host_bound and bench.per_call:
        per_call, device = bench.per_call.speedup.value, speedup.value
        found.append(
            f"host-bound {bench.host_bound}: {per_call:.2f}x per call against {device:.2f}x on "
            "the device"
        )
    if bench.launch_bound and bench.floor_us is not None:
        found.append(f"launch-bound (floor {bench.floor_us:.1f} us; try --graph)")
    for side, timing in (("solution", bench.solution), ("reference", bench.reference)):
        if timing.rse > NOISY_RSE:
            stopped = f", stopped by {bench.stop}" if bench.stop else ""
            found.append(f"noisy {side} (RSE {100 * timing.rse:.1f}%{stopped})")
    if row.throttled_samples and bench.state:
        reasons = ", ".join(bench.state.reasons)
        found.append(f"throttled: {row.throttled_samples} samples ({reasons})")
    shares = (row.load_1m, row.cpu_count, row.gpu_processes, bool(row.cpu_timed))
    found += load.flags(load.Load(*shares), bench.others_cpu_share)
    if bench.note:
        found.append(bench.note)
    if bench.compile and bench.compile.mismatch:
        found.append("torch.compile's output differs from eager's: no 'vs compile'")
    return found


def column(header: str | None = None, *, default: Any = MISSING, csv: bool = True) -> Any:
    """A TableRow field: `header`, its heading where the markdown table shows it (in
    MARKDOWN's order); `csv`, whether the CSV has it (in the fields' order)."""
    return field(default=default, metadata={"header": header, "csv": csv})


@dataclass(frozen=True, kw_only=True)
class TableRow:
    """One line of a problem's table and CSV: a solution's benchmark shape, or its verdict
    alone where it did not reach timing (then every timing column is None). Each column is
    declared here once: its name, type, markdown heading and place in the CSV."""

    # the solution and its record; the markdown table's columns carry their header
    solution: str = column("solution")
    shape: str = column("shape", default="-")
    status: str = column("status")
    median_us: float | None = column("time (us)", default=None)
    iqr_pct: float | None = column("IQR", default=None)
    n: int | None = column("n", default=None)
    ref_median_us: float | None = column("eager (us)", default=None)
    gbps: float | None = column("GB/s", default=None)
    ceiling_pct: float | None = column("of copy", default=None)
    when: str = column("run (UTC)")
    # the speedups and their intervals; per call, host included; torch.compile
    speedup: float | None = column("speedup [95% CI]", default=None)
    speedup_low: float | None = column(default=None)
    speedup_high: float | None = column(default=None)
    vs_compile: float | None = column("vs compile", default=None)
    vs_compile_low: float | None = column(default=None)
    vs_compile_high: float | None = column(default=None)
    per_call_us: float | None = column(default=None)
    ref_per_call_us: float | None = column(default=None)
    per_call_speedup: float | None = column("per call [95% CI]", default=None)
    per_call_speedup_low: float | None = column(default=None)
    per_call_speedup_high: float | None = column(default=None)
    host_bound: str | None = column(default=None)
    compile_median_us: float | None = column(default=None)
    compile_cached: bool | None = column(default=None)
    compile_mismatch: str | None = column(default=None)
    # the timer's statistics
    ref_iqr_pct: float | None = column(default=None)
    rse: float | None = column(default=None)
    ref_rse: float | None = column(default=None)
    stop: str | None = column(default=None)
    mode: str | None = column(default=None)
    floor_us: float | None = column(default=None)
    launch_bound: bool | None = column(default=None)
    # the work and the roof; what ncu counted (--ncu); the GPU's state, the machine's load
    bytes: int | None = column(default=None)
    flops: int | None = column(default=None)
    tflops: float | None = column(default=None)
    # the speed of light: T_SOL, the share of it reached, the SOL scores, why it is partial
    sol_us: float | None = column(default=None)
    sol_pct: float | None = column("of SOL", default=None)
    sol_score: float | None = column("SOL score", default=None)
    sol_score_compile: float | None = column(default=None)
    sol_partial: str | None = column(default=None)
    ncu_bytes: int | None = column(default=None)
    ncu_pct: float | None = column(default=None)
    ncu_kernels: int | None = column(default=None)
    sm_mhz: str | None = column(default=None)
    temp_c: str | None = column(default=None)
    throttled_samples: int | None = column(default=None)
    own_share: float | None = column()
    reference_share: float | None = column()
    load_1m: float | None = column(default=None)
    cpu_count: int | None = column(default=None)
    gpu_processes: int | None = column(default=None)
    # the row's flags and the record's text
    flags: str | None = column(default=None)
    detail: str = column()
    warnings: str = column()
    log: str | None = column()
    solution_path: str = column()
    run_id: str = column()
    precision: str | None = column(default=None)  # --precision's, None: the problem's own
    cpu_timed: bool | None = column(default=None, csv=False)  # load.flags reads it


# The markdown table's columns, in order; "notes" (the row's detail, flags and log) is made
# from several fields (`notes`).
MARKDOWN = (
    *("solution", "shape", "status", "median_us", "iqr_pct", "n", "ref_median_us", "speedup"),
    *("per_call_speedup", "vs_compile", "gbps", "ceiling_pct", "sol_pct", "sol_score"),
    *("when", "notes"),
)
_HEADERS = {f.name: f.metadata["header"] for f in fields(TableRow)} | {"notes": "notes"}
COLUMNS = {name: _HEADERS[name] for name in MARKDOWN}  # column: heading in the markdown table
CSV_COLUMNS = [f.name for f in fields(TableRow) if f.metadata["csv"]]
