"""Compare two recorded runs: two GPUs, or one GPU before and after a change.

A side is a spec `FOLDER[@REF]`: a results folder, and optionally a run id prefix or a commit
prefix that picks some of its records. Each side holds the latest record of each solution
among the picked ones. Each shape timed on both sides gets two ratios, each above 1 when the
new side is faster, each with a 95% interval and a verdict:

- the time ratio, the old median time over the new (`time_ratio`): true where both runs had
  the machine alike, misled where its load (or clocks) differed, since eager moves too;
- the speedup ratio, the new speedup over eager over the old one (`speedup_ratio`): each
  speedup is paired within its run, so a machine that slowed both sides alike cancels.

A verdict comes from the interval, never the point: "faster" when all of it lies above
1 + threshold, "slower" when all of it lies below 1 / (1 + threshold), else "unchanged". Each
side's load, where its records hold it (harness.results.load), is shown beside.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from tabulate import tabulate

from harness import record, settings, stats
from harness.record import BenchRow, RunRecord
from harness.results import load, report
from harness.results.summary import CPU_MARK, latest_records, ran_on_cpu_beside_gpu
from harness.verdicts import UserError

THRESHOLD = settings.COMPARE_THRESHOLD  # smaller is "unchanged", even with a tight interval
SHOWN_CHOICES = 5  # how many run ids and commits an error message names


@dataclass(frozen=True)
class Side:
    """One side of a comparison: what the spec said and the latest record of each solution."""

    spec: str
    folder: Path
    ref: str | None
    latest: list[RunRecord]

    def commits(self) -> list[str]:
        return sorted({r.machine.commit or "?" for r in self.latest})

    def gpus(self) -> list[str]:
        return sorted({r.machine.gpu or "CPU" for r in self.latest})

    def run_ids(self) -> list[str]:
        return sorted({r.run_id for r in self.latest})


def parse_spec(spec: str) -> tuple[Path, str | None]:
    """'results/x@abc' -> (results/x, 'abc'); a spec without '@' (or an existing folder named
    with one) has no ref."""
    folder, sep, ref = spec.rpartition("@")
    if not sep or Path(spec).is_dir():
        return Path(spec), None
    if not ref:
        raise UserError(f"{spec!r}: nothing after '@'; give a run id or commit prefix, or no '@'")
    return Path(folder), ref


def select(spec: str) -> Side:
    """The side a spec names; a UserError when its folder has no records or its ref matches none."""
    folder, ref = parse_spec(spec)
    all_records = record.read(folder)
    if not all_records:
        raise UserError(f"{folder}: no recorded runs there (no {record.LOG_NAME} with records)")
    picked = [r for r in all_records if ref is None or _matches(r, ref)]
    if not picked:
        raise UserError(
            f"{spec}: no record has a run id or commit starting with {ref!r}; "
            f"{folder} has {_choices(all_records)}"
        )
    return Side(spec, folder, ref, latest_records(picked))


def _matches(run: RunRecord, ref: str) -> bool:
    return run.run_id.startswith(ref) or (run.machine.commit or "").startswith(ref)


def _choices(all_records: list[RunRecord]) -> str:
    """'run ids a, b; commits c, d': the newest few of each, for an error message."""
    run_ids = list(dict.fromkeys(r.run_id for r in reversed(all_records)))
    commits = list(dict.fromkeys(c for r in reversed(all_records) if (c := r.machine.commit)))
    return (
        f"run ids {', '.join(run_ids[:SHOWN_CHOICES])}"
        f"; commits {', '.join(commits[:SHOWN_CHOICES]) or 'none recorded'}"
    )


def verdict(ratio: stats.Interval, threshold: float = THRESHOLD) -> str:
    """'faster', 'slower' or 'unchanged' for a ratio above 1 when the new side is faster (old
    over new time, new over old speedup), from its interval alone."""
    if ratio.low > 1 + threshold:
        return "faster"
    if ratio.high < 1 / (1 + threshold):
        return "slower"
    return "unchanged"


def time_ratio(old_bench: BenchRow, new_bench: BenchRow) -> stats.Interval:
    """Old median time over new, with an unpaired interval from both sides' samples."""
    return stats.unpaired_ratio(old_bench.solution.times_us, new_bench.solution.times_us)


def speedup_ratio(old_bench: BenchRow, new_bench: BenchRow) -> tuple[stats.Interval, bool]:
    """New speedup over eager divided by the old one, with an interval, and whether it is
    paired on both sides.

    Each side's speedup carries its 95% interval, the median of its run's per-round ratios
    (stats.paired_ratio); the quotient's interval divides their bounds crosswise, so that their
    half-widths add on a log scale (stats.quotient, conservative). A row recorded before the
    paired sampler has no speedup interval: that side then takes the unpaired interval of its
    two medians from its raw samples (stats.unpaired_ratio), wider because drift within that
    run does not cancel, and the ratio is marked unpaired; it still gets a verdict.
    """
    (old_speedup, old_paired), (new_speedup, new_paired) = _speedup(old_bench), _speedup(new_bench)
    return stats.quotient(new_speedup, old_speedup), old_paired and new_paired


def _speedup(bench: BenchRow) -> tuple[stats.Interval, bool]:
    """The row's speedup over eager with its interval, and whether that interval is paired."""
    if bench.speedup:
        return bench.speedup, True
    return stats.unpaired_ratio(bench.reference.times_us, bench.solution.times_us), False


@dataclass(frozen=True)
class ShapeChange:
    """A shape timed on both sides: the solution's time and speedup, old against new."""

    problem: str
    solution: str
    shape: str
    old_us: float
    new_us: float
    ratio: stats.Interval  # time old/new
    verdict: str
    old_speedup: float
    new_speedup: float
    speedup_ratio: stats.Interval  # speedup new/old
    speedup_verdict: str
    paired: bool  # both sides' speedups paired within their runs
    old_load: str
    new_load: str


@dataclass(frozen=True)
class StatusChange:
    problem: str
    solution: str
    old: str
    new: str


@dataclass(frozen=True)
class OneSided:
    """A solution, or one of its shapes, recorded on one side only."""

    problem: str
    solution: str
    shape: str
    status: str


@dataclass
class Comparison:
    shapes: list[ShapeChange] = field(default_factory=list)
    status: list[StatusChange] = field(default_factory=list)
    only_old: list[OneSided] = field(default_factory=list)
    only_new: list[OneSided] = field(default_factory=list)


def compare_runs(old: Side, new: Side, threshold: float = THRESHOLD) -> Comparison:
    """The rows of a comparison: shapes timed on both sides, status changes, and solutions or
    shapes present on one side only."""
    _same_profile(old, new)
    old_by, new_by = _by_solution(old.latest), _by_solution(new.latest)
    result = Comparison()
    for key in sorted(old_by.keys() | new_by.keys()):
        before, after = old_by.get(key), new_by.get(key)
        if before is None or after is None:
            one = before or after
            assert one is not None
            side = result.only_old if after is None else result.only_new
            side.append(_one_sided(one, "(every shape)"))
            continue
        if before.status != after.status:
            result.status.append(StatusChange(*_names(before), before.status, after.status))
        _compare_shapes(before, after, threshold, result)
    return result


def _same_profile(old: Side, new: Side) -> None:
    """Refuse to set rows judged two ways side by side: under two profiles (run.py --as) their
    timers differ; at two precisions (--precision) their kernels do different work."""
    ways = (
        ("under different profiles", lambda r: r.settings.checking.profile, "--as"),
        (
            "at different precisions",
            lambda r: r.settings.checking.precision or "as written",
            "--precision",
        ),
    )
    for what, way, flag in ways:
        found = {side.spec: sorted({way(r) for r in side.latest}) for side in (old, new)}
        if len({w for each in found.values() for w in each}) > 1:
            shown = "; ".join(f"{spec}: {', '.join(each)}" for spec, each in found.items())
            raise UserError(
                f"these runs were judged {what} ({shown}) and do not compare; "
                f"compare runs of one (run.py {flag})"
            )


def _by_solution(latest: list[RunRecord]) -> dict[tuple[str, str], RunRecord]:
    return {(r.problem, r.solution_path): r for r in latest}


def _shape_key(bench: BenchRow) -> tuple[str, tuple[str, ...]]:
    """A shape is its name and its inputs: a 'default' whose inputs changed is another shape."""
    return bench.name, bench.inputs


def _names(run: RunRecord) -> tuple[str, str]:
    """The problem, and the solution as the tables name it."""
    cpu = CPU_MARK if ran_on_cpu_beside_gpu(run) else ""
    return run.problem, run.solution + cpu


def _one_sided(run: RunRecord, shape: str) -> OneSided:
    return OneSided(*_names(run), shape, run.status)


def _compare_shapes(
    before: RunRecord,
    after: RunRecord,
    threshold: float,
    result: Comparison,
) -> None:
    old_shapes = {_shape_key(b): b for b in before.benchmarks}
    new_shapes = {_shape_key(b): b for b in after.benchmarks}
    for key, old_bench in old_shapes.items():
        if key not in new_shapes:
            result.only_old.append(_one_sided(before, report.bench_label(old_bench)))
            continue
        new_bench = new_shapes[key]
        ratio = time_ratio(old_bench, new_bench)
        speedups, paired = speedup_ratio(old_bench, new_bench)
        result.shapes.append(
            ShapeChange(
                *_names(after),
                shape=report.bench_label(new_bench),
                old_us=old_bench.solution.median_us,
                new_us=new_bench.solution.median_us,
                ratio=ratio,
                verdict=verdict(ratio, threshold),
                old_speedup=report.bench_speedup(old_bench).value,
                new_speedup=report.bench_speedup(new_bench).value,
                speedup_ratio=speedups,
                speedup_verdict=verdict(speedups, threshold),
                paired=paired,
                old_load=load.cell(before),
                new_load=load.cell(after),
            )
        )
    for key, new_bench in new_shapes.items():
        if key not in old_shapes:
            result.only_new.append(_one_sided(after, report.bench_label(new_bench)))


def render_comparison(old_spec: str, new_spec: str, threshold: float = THRESHOLD) -> str:
    """The comparison of two specs as markdown: both sides, shapes with both ratios and their
    verdicts, and what changed status or is present on one side only."""
    old, new = select(old_spec), select(new_spec)
    result = compare_runs(old, new, threshold)
    parts = [
        f"# Comparison: {old_spec} -> {new_spec}\n\n{_sides_table(old, new)}",
        _explanation(result.shapes, threshold),
        "## Shapes timed on both sides\n\n" + _shapes_table(result.shapes),
    ]
    titles = {"status": "Status changes", "only_old": "Only in old", "only_new": "Only in new"}
    for key, title in titles.items():
        rows = getattr(result, key)
        if rows:
            parts.append(f"## {title}\n\n" + _plain_table(rows))
    return "\n\n".join(parts) + "\n"


def _explanation(rows: list[ShapeChange], threshold: float) -> str:
    """How to read the shapes table, the verdicts counted, and where the two ratios disagree."""
    text = (
        f"Time old/new is the old median time over the new; speedup new/old is the new "
        f"speedup over eager PyTorch over the old one (each paired within its run, so a machine "
        f"that slowed both the solution and eager alike cancels). Above 1, the new side is "
        f"faster. Each has a 95% interval, and is faster when the whole interval lies above "
        f"{1 + threshold:g}, slower when it lies below 1/{1 + threshold:g}, else unchanged. "
        f"Load is the 1-minute load average over the CPU count as each solution's run began, "
        f"and other processes on the GPU, where recorded.{CPU_MARK} marks a C++ solution timed "
        f"on the CPU against the reference on the CPU."
    )
    if not all(row.paired for row in rows):
        text += (
            " * marks a speedup ratio with a side recorded before speedups were paired: that "
            "side's interval is the unpaired one of its two medians."
        )
    counts = [
        f"Time old/new: {_counted(rows, 'verdict')}.",
        f"Speedup new/old: {_counted(rows, 'speedup_verdict')}.",
    ]
    split = sum(row.verdict != row.speedup_verdict for row in rows)
    if split:
        counts.append(
            f"The two verdicts disagree on {split} shape(s): eager's own time moved between the "
            "runs (the machine's load or clocks, torch, or how the harness times); "
            "docs/results.md, 'Comparing two runs', says which to trust."
        )
    return text + "\n\n" + " ".join(counts)


def _counted(rows: list[ShapeChange], key: str) -> str:
    """'1 faster, 0 slower, 2 unchanged': the rows' verdicts under `key`."""
    verdicts = [getattr(row, key) for row in rows]
    return ", ".join(f"{verdicts.count(v)} {v}" for v in ("faster", "slower", "unchanged"))


def _sides_table(old: Side, new: Side) -> str:
    lines = [
        [
            name,
            side.spec,
            str(side.folder),
            ", ".join(side.commits()),
            ", ".join(side.gpus()),
            ", ".join(side.run_ids()),
            load.side_summary(side.latest),
        ]
        for name, side in (("old", old), ("new", new))
    ]
    headers = ["side", "spec", "folder", "commit(s)", "gpu", "run id(s)", "load (1 min/CPUs)"]
    return tabulate(lines, headers=headers, tablefmt="github", disable_numparse=True)


def _shapes_table(rows: list[ShapeChange]) -> str:
    lines = [
        [
            row.problem,
            row.solution,
            row.shape,
            _us(row.old_us),
            _us(row.new_us),
            _ratio_cell(row.ratio),
            row.verdict,
            f"{row.old_speedup:.2f}x",
            f"{row.new_speedup:.2f}x",
            _ratio_cell(row.speedup_ratio) + ("" if row.paired else "*"),
            row.speedup_verdict,
            f"{row.old_load} -> {row.new_load}",
        ]
        for row in rows
    ]
    headers = [
        "problem",
        "solution",
        "shape",
        "old (us)",
        "new (us)",
        "time old/new [95%]",
        "by time",
        "old speedup",
        "new speedup",
        "speedup new/old [95%]",
        "by speedup",
        "load old -> new",
    ]
    if all(row.old_load == row.new_load == "-" for row in rows):  # none recorded
        headers, lines = headers[:-1], [line[:-1] for line in lines]
    return tabulate(lines, headers=headers, tablefmt="github", disable_numparse=True)


def _ratio_cell(ratio: stats.Interval) -> str:
    return f"{ratio.value:.3f} [{ratio.low:.3f}, {ratio.high:.3f}]"


def _plain_table(rows: list[StatusChange] | list[OneSided]) -> str:
    return tabulate(
        [asdict(row) for row in rows], headers="keys", tablefmt="github", disable_numparse=True
    )


def _us(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 1000 else f"{value:,.0f}"
