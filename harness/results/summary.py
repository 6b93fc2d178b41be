"""The summary across problems: each solution's score, each problem's best, fast_p over all.

A solution's score is the geometric mean, over its benchmark shapes, of its speedup over eager
PyTorch; only an `ok` solution with timed shapes has one. A problem's best is its highest-scoring
`ok` solution, and fast_p (KernelBench's metric) is the share of problems whose best is correct
and scores above p. A problem where nothing is `ok` still counts in fast_p's denominator.

On a GPU machine, a C++ solution timed on the CPU (against the reference on the CPU) is shown
but never chosen as a problem's best: its speedup does not compare with the GPU's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from tabulate import tabulate

from harness import codec, verdicts
from harness.record import LOG_NAME, Machine, RunRecord
from harness.results import baselines, report, sol
from harness.stats import geomean

SUMMARY_NAME = "summary.md"
FAST_P = (1.0, 1.5, 2.0)  # the thresholds p of fast_p
CPU_MARK = " (CPU)"  # appended to a CPU-run solution's name on a GPU machine


def latest_records(all_records: list[RunRecord]) -> list[RunRecord]:
    """The newest record of each solution of every problem, sorted by problem then solution."""
    problems = sorted({r.problem for r in all_records})
    return [r for p in problems for r in report.latest_per_solution(all_records, p)]


def score(record: RunRecord) -> float | None:
    """Geomean of the speedups over eager across shapes; None unless ok with timed shapes."""
    if record.status != verdicts.OK or not record.benchmarks:
        return None
    return geomean([report.bench_speedup(b).value for b in record.benchmarks])


def compile_score(record: RunRecord) -> float | None:
    """Geomean of the speedups over torch.compile; None unless every shape has one."""
    if record.status != verdicts.OK or not record.benchmarks:
        return None
    speedups = [baselines.bench_vs_compile(b) for b in record.benchmarks]
    if not all(speedups):
        return None
    return geomean([s.value for s in speedups if s])


def sol_means(record: RunRecord) -> tuple[float | None, float | None]:
    """Geomeans over the shapes of the share of T_SOL reached and of the SOL score against
    eager (harness.results.sol.sol_reached); each None unless ok and every shape has it."""
    if record.status != verdicts.OK or not record.benchmarks or record.device == "cpu":
        return None, None  # a row timed on the CPU: the GPU's bound does not bound it
    reached = [sol.sol_reached(bench, record.ceiling) for bench in record.benchmarks]
    shares = [pair[0] for pair in reached if pair]
    scores = [pair[1] for pair in reached if pair and pair[1] is not None and pair[1] > 0]
    whole = len(record.benchmarks)
    return (
        geomean(shares) if len(shares) == whole else None,
        geomean(scores) if len(scores) == whole else None,
    )


def ran_on_cpu_beside_gpu(record: RunRecord) -> bool:
    """True for a solution timed on the CPU on a machine that has a GPU."""
    return record.device == "cpu" and bool(record.machine.gpu)


@dataclass(frozen=True)
class SummaryRow:
    """A solution's line in the summary, from its latest record."""

    problem: str
    solution: str  # its stem, or its path where two files of the problem share the stem
    solution_path: str
    status: str
    shapes: int
    score: float | None  # geomean of its speedups (`score`)
    vs_compile: float | None  # ... over torch.compile (`compile_score`)
    sol_share: float | None  # geomean of the shares of T_SOL reached (`sol_means`) ...
    sol_score: float | None  # ... and of the SOL scores against eager
    cpu: bool  # a CPU-run solution on a GPU machine: never a problem's best


def summary_rows(all_records: list[RunRecord]) -> list[SummaryRow]:
    """One row per (problem, solution) from its latest record."""
    latest = latest_records(all_records)
    rows = []
    for record in latest:
        same_stem = [r for r in latest if _stem_key(r) == _stem_key(record)]
        sol_share, sol_score = sol_means(record)
        rows.append(
            SummaryRow(
                problem=record.problem,
                solution=record.solution if len(same_stem) == 1 else record.solution_path,
                solution_path=record.solution_path,
                status=record.status,
                shapes=len(record.benchmarks),
                score=score(record),
                vs_compile=compile_score(record),
                sol_share=sol_share,
                sol_score=sol_score,
                cpu=ran_on_cpu_beside_gpu(record),
            )
        )
    return rows


def _stem_key(record: RunRecord) -> tuple[str, str]:
    return record.problem, record.solution


def best_per_problem(rows: list[SummaryRow]) -> dict[str, SummaryRow | None]:
    """Each problem's highest-scoring ok row (CPU-run rows excluded), or None where none is ok."""
    best: dict[str, SummaryRow | None] = {row.problem: None for row in rows}
    for row in rows:
        if row.status != verdicts.OK or row.score is None or row.cpu:
            continue
        current = best[row.problem]
        if current is None or row.score > (current.score or 0.0):
            best[row.problem] = row
    return best


def fast_p(best: dict[str, SummaryRow | None], p: float) -> float:
    """Share of problems whose best solution is ok and scores above p; nan with no problems."""
    if not best:
        return math.nan
    fast = [row for row in best.values() if row is not None and (row.score or 0.0) > p]
    return len(fast) / len(best)


def summary_markdown(all_records: list[RunRecord]) -> str:
    """The summary of a run log's records as markdown: solutions, best per problem, fast_p."""
    rows = summary_rows(all_records)
    best = best_per_problem(rows)
    latest = latest_records(all_records)
    weak, refused = weak_problems(latest), not_judged(latest)
    parts = [
        _header(latest, rows, best, (len(weak), len(refused))),
        "## Solutions\n\n" + _solutions_table(rows, best),
        "## Best per problem\n\n" + _best_table(rows, best),
        "## Over all problems\n\n" + _overall(best),
    ]
    if weak:
        parts.append("## Weak problems\n\n" + _weak_table(weak))
    if refused:
        lines = [[problem, why] for problem, why in refused.items()]
        table = tabulate(lines, headers=["problem", "why"], tablefmt="github")
        parts.append(
            "## Refused, not judged\n\nEach solution of these is recorded `problem_error` "
            "and counts as not ok in fast_p:\n\n" + table
        )
    if any(row.cpu for row in rows):
        parts.append(
            f"`{CPU_MARK.strip()}`: a C++ solution checked and timed on the CPU, against the "
            "reference on the CPU. Its speedup does not compare with the GPU's, so it is never "
            "chosen as a problem's best."
        )
    return "\n\n".join(parts) + "\n"


def weak_problems(latest: list[RunRecord]) -> dict[str, RunRecord]:
    """Each problem whose newest record carries weaknesses of its audit, with that record."""
    newest: dict[str, RunRecord] = {}
    for record in latest:
        if record.problem not in newest or record.time > newest[record.problem].time:
            newest[record.problem] = record
    return {name: record for name, record in sorted(newest.items()) if record.weaknesses}


def not_judged(latest: list[RunRecord]) -> dict[str, str]:
    """Each problem whose solutions were all refused with it, with why (their detail)."""
    by_problem: dict[str, list[RunRecord]] = {}
    for record in latest:
        by_problem.setdefault(record.problem, []).append(record)
    return {
        name: records[0].detail.removeprefix(REFUSED)
        for name, records in sorted(by_problem.items())
        if all(r.status == verdicts.PROBLEM_ERROR and r.detail.startswith(REFUSED) for r in records)
    }


REFUSED = "not judged: "  # the detail of a solution of a problem the run refused


def _weak_table(weak: dict[str, RunRecord]) -> str:
    lines = [
        [problem, finding.check, finding.message]
        for problem, record in weak.items()
        for finding in record.weaknesses
    ]
    table = tabulate(
        lines, headers=["problem", "weakness", "what the audit found"], tablefmt="github"
    )
    return (
        "Judged, but a wrong solution could pass these (each row of theirs is flagged "
        "`weak problem`; `--strict-audit` refuses them instead):\n\n" + table
    )


def write_summary(folder: Path, all_records: list[RunRecord]) -> Path:
    """Re-render `summary.md` in `folder` from `all_records` (its run log, as
    harness.record.read gives it); returns its path. The caller holds the folder's lock
    (harness.results.rendering)."""
    path = folder / SUMMARY_NAME
    codec.write_atomic(path, summary_markdown(all_records))
    return path


def _header(
    latest: list[RunRecord],
    rows: list[SummaryRow],
    best: dict[str, SummaryRow | None],
    flagged: tuple[int, int],
) -> str:
    """The summary's title and how to read it; `flagged`: how many problems are weak, and how
    many were refused."""
    newest = report.newest(latest)
    machine = newest.machine if newest else Machine()
    where = machine.gpu or f"CPU ({machine.cpu})"
    versions = (("torch", machine.torch), ("cuda", machine.cuda), ("driver", machine.driver))
    env = ", ".join(f"{key} {value}" for key, value in versions if value)
    commits = sorted({r.machine.commit or "?" for r in latest})
    weak, refused = flagged
    accounted = f"{len(best) - refused} judged ({weak} of them weak)"
    if refused:
        accounted += f", {refused} refused and not judged"
    return (
        f"# Summary on {where}\n\n"
        f"Latest result of each of {len(rows)} solution(s) of {len(best)} problem(s): "
        f"{accounted}. "
        "score: the geometric mean, over the solution's benchmark shapes, of its speedup over "
        "eager PyTorch (ok solutions only); vs compile: the same over the torch.compile'd "
        "reference, where every shape has it. A problem's best is its ok solution with the "
        "highest score; fast_p is the share of problems whose best is correct and scores above "
        "p, counting problems where nothing is ok.\n\n"
        f"Newest run {newest.time if newest else '?'}, {env or 'environment unknown'}; "
        f"commit(s) {', '.join(commits) or '?'}. Raw samples: `{LOG_NAME}`."
    )


def _times(value: float | None) -> str:
    return "" if value is None or math.isnan(value) else f"{value:.2f}x"


def _solutions_table(rows: list[SummaryRow], best: dict[str, SummaryRow | None]) -> str:
    lines = [
        [
            row.problem,
            row.solution + (CPU_MARK if row.cpu else ""),
            row.status,
            str(row.shapes),
            _times(row.score),
            _times(row.vs_compile),
            _percent(row.sol_share),
            _plain(row.sol_score),
            "yes" if best.get(row.problem) is row else "",
        ]
        for row in rows
    ]
    headers = ["problem", "solution", "status", "shapes", "score", "vs compile"]
    headers += ["of SOL", "SOL score", "best"]
    return tabulate(lines, headers=headers, tablefmt="github", disable_numparse=True)


def _best_table(rows: list[SummaryRow], best: dict[str, SummaryRow | None]) -> str:
    cpu_only = {row.problem for row in rows if row.cpu and row.status == verdicts.OK}
    lines = [_best_line(problem, row, problem in cpu_only) for problem, row in best.items()]
    headers = ["problem", "best solution", "score", "vs compile", "of SOL", "SOL score"]
    return tabulate(lines, headers=headers, tablefmt="github", disable_numparse=True)


def _best_line(problem: str, row: SummaryRow | None, cpu_only: bool) -> list[str]:
    if row is None:
        return [problem, "(only CPU runs ok)" if cpu_only else "(none ok)", "", "", "", ""]
    scores = [_times(row.score), _times(row.vs_compile), _percent(row.sol_share)]
    return [problem, row.solution, *scores, _plain(row.sol_score)]


def _overall(best: dict[str, SummaryRow | None]) -> str:
    scores = [row.score for row in best.values() if row is not None and row.score is not None]
    lines = [[f"fast_{p:g}", _share(fast_p(best, p), len(best))] for p in FAST_P]
    table = tabulate(lines, headers=["metric", "value"], tablefmt="github", disable_numparse=True)
    bests = [row for row in best.values() if row is not None]
    shares = [row.sol_share for row in bests if row.sol_share is not None]
    sol_scores = [row.sol_score for row in bests if row.sol_score is not None]
    return (
        f"Geometric mean of the best scores: {_times(geomean(scores)) or 'none'} "
        f"(over {len(scores)} of {len(best)} problem(s) with a best solution); of the bests' "
        f"shares of the speed of light: {_percent(geomean(shares)) or 'none'}, and of their SOL "
        f"scores: {_plain(geomean(sol_scores)) or 'none'} (over {len(shares)} and "
        f"{len(sol_scores)} with a bound).\n\n{table}"
    )


def _percent(value: float | None) -> str:
    return "" if value is None or math.isnan(value) else f"{100 * value:.0f}%"


def _plain(value: float | None) -> str:
    return "" if value is None or math.isnan(value) else f"{value:.2f}"


def _share(fraction: float, total: int) -> str:
    if math.isnan(fraction):
        return ""
    return f"{fraction:.2f} ({round(fraction * total)} of {total})"
