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

from dataclasses import dataclass
from pathlib import Path

from harness import codec, stats
from harness.record import BenchRow, CompileBaseline, CompiledRow
from harness.stats import Interval

LOG_NAME = "baselines.jsonl"


@dataclass(frozen=True)
class BaselineKey:
    """What a compile baseline is cached under. On disk `mode` is the row's own timer."""

    problem: str
    reference_hash: str
    mode: str | None
    flush: str = "read"
    gpu: str | None = None
    torch: str | None = None


@dataclass(frozen=True)
class MeasuredBy:
    """The run that measured a baseline: its id, when (ISO 8601), and the GPU's driver."""

    run_id: str | None = None
    time: str | None = None
    driver: str | None = None


@dataclass(frozen=True)
class Baseline:
    """One line of baselines.jsonl: a shape's compile baseline with its key and its run (on
    disk one flat object: the key's, the run's and the row's fields, the row's mode winning)."""

    key: BaselineKey
    by: MeasuredBy
    row: CompiledRow


def read(folder: Path) -> list[Baseline]:
    """Every baseline recorded in `folder`, oldest first; a line that is not one is skipped."""
    found = []
    for line in codec.read(folder, LOG_NAME):
        try:
            key, by = codec.decode(BaselineKey, line), codec.decode(MeasuredBy, line)
            found.append(Baseline(key, by, codec.decode(CompiledRow, line)))
        except (TypeError, ValueError):
            continue
    return found


def cached(folder: Path, wanted: BaselineKey) -> list[Baseline]:
    """Recorded baselines of `wanted`'s problem, reference, timer, flush, GPU and torch."""
    return [baseline for baseline in read(folder) if baseline.key == wanted]


def store(folder: Path, measured: list[Baseline]) -> None:
    """Append each baseline, one line each."""
    for baseline in measured:
        codec.append(folder, flat(baseline), LOG_NAME)


def flat(baseline: Baseline) -> codec.JsonObject:
    """A baseline as its line of baselines.jsonl."""
    parts = (baseline.key, baseline.by, baseline.row)
    return {k: v for part in parts for k, v in codec.encode(part).items()}


def versus(
    row: BenchRow, entries: list[Baseline], run_id: str
) -> tuple[CompileBaseline | None, Interval | None]:
    """The compile baseline of a solution's benchmark row, from the newest entry of the same
    shape and timer, and the row's speedup over it; (None, None) when there is none, and no
    speedup over a compiled reference that gave a wrong answer. `run_id` is this run's, so a
    baseline measured by an earlier run reads as cached."""
    shape = (row.name, row.inputs, row.mode)
    matching = [e for e in entries if (e.row.name, e.row.inputs, e.row.mode) == shape]
    if not matching:
        return None, None
    entry = matching[-1]
    compiled = entry.row.compiled
    interval = compiled.interval
    baseline = CompileBaseline(
        median_us=compiled.median_us,
        median_low_us=interval.low,
        median_high_us=interval.high,
        compile_s=entry.row.compile_s,
        cached=entry.by.run_id != run_id,
        measured_at=entry.by.time,
        mismatch=entry.row.mismatch,
    )
    if baseline.mismatch:  # a wrong answer is no baseline: no speedup over it
        return baseline, None
    return baseline, stats.unpaired_ratio(compiled.times_us, row.solution.times_us)


def bench_vs_compile(bench: BenchRow) -> Interval | None:
    """The speedup over the torch.compile'd reference, or None: not measured, or the compiled
    reference gave a different answer from eager (then it is no baseline)."""
    if not bench.vs_compile or (bench.compile and bench.compile.mismatch):
        return None
    return bench.vs_compile


def compile_columns(bench: BenchRow) -> dict[str, object]:
    """A table row's torch.compile columns (harness.results.report.TableRow)."""
    versus, compiled = bench_vs_compile(bench), bench.compile
    if not compiled:
        return {}
    if not versus:
        return {
            "compile_median_us": compiled.median_us,
            "compile_mismatch": compiled.mismatch,
        }
    return {
        "vs_compile": versus.value,
        "vs_compile_low": versus.low,
        "vs_compile_high": versus.high,
        "compile_median_us": compiled.median_us,
        "compile_cached": compiled.cached,
    }
