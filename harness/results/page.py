"""A results folder as one HTML page, `index.html`: the summary across problems, each problem's
table and chart, a comparison of any two runs, and (from the HTTP service) live submissions.

Self-contained: inline CSS and a small inline script, no network, no build step. Python decides
what the tables hold with the markdown's own functions (harness.results.report and .summary);
the script lays the data out, sorts the tables and computes the comparison of two runs.

Every string of a record may have been written by a hostile solution's author, so none is ever
parsed as HTML: the data travels as JSON in `<script type="application/json" id="data">`, with
`<`, `>` and `&` written as \\u003c, \\u003e and \\u0026 (no `</script>` can close it early), and
the script builds every cell with createElement and textContent. A Content-Security-Policy lets
only this module's own script and style run (by their hashes) and loads nothing but images from
beside the page.

The URL's fragment drives the page as clicks do, so a headless browser can test it:

- `#sort=<table-id>:<column>` sorts a table ascending, `:-<column>` descending; several tables
  at once are separated by commas (`sort=summary:-score,compare:ratio`). Numbers sort as
  numbers, blanks come last either way. Clicking a header writes its sort there.
- `#compare=<old run id>,<new run id>` picks the two runs compared (by default the two newest).
- Both at once: `#sort=compare:-ratio&compare=<old>,<new>`.

Table ids and their columns' keys: `problem-<name>` for each problem (solution, status, shape,
speedup, median_us, ref_median_us, vs_compile, sol_score, flags: TableRow's fields); `summary`
(problem, best, score, vs_compile, sol_share, sol_score, solutions, ok, statuses, notes);
`compare` (problem, solution, shape, old, new, ratio: new speedup over old); `submissions`.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Generic, TypeVar

from harness import codec, verdicts
from harness.record import RunRecord
from harness.results import report, summary
from harness.stats import geomean

PAGE_NAME = "index.html"
REFRESH_S = 5  # a page showing live submissions reloads itself this often
DIGITS = 5  # significant digits the page's numbers keep (their text shows fewer)
MEANINGS = {str(status): meaning for status, meaning in verdicts.MEANING.items()}
R = TypeVar("R")
Sort = float | str | None  # what a cell sorts by: numbers as numbers, None (a blank) last
Pairs = list[list[str]]  # (label, text) pairs, as a row's details and the legend show them


@dataclass(frozen=True)
class Column(Generic[R]):
    """One column of a table: its key (the name `#sort=` uses), heading, the value it sorts by
    and the text it shows (`text`; by default the value itself, a blank for None); a number
    keeps `digits` significant digits in the page's data."""

    key: str
    header: str
    value: Callable[[R], Sort]
    text: Callable[[R], str] | None = None
    digits: int = DIGITS

    def cell(self, row: R) -> str | list[Sort]:
        """The cell as the page's data holds it: its text alone where it sorts by that text,
        else [text, value]."""
        value = self.value(row)
        if isinstance(value, float):
            value = _round(value, self.digits)
        text = self.text(row) if self.text else "" if value is None else str(value)
        return text if value == text else [text, value]


@dataclass(frozen=True)
class ProblemLine:
    """A problem's line in the summary: its best solution, statuses, and why it is weak."""

    problem: str
    best: summary.SummaryRow | None
    statuses: Counter[str]
    notes: tuple[str, ...]


def _best_column(key: str, header: str, fmt: Callable[[float | None], str]) -> Column[ProblemLine]:
    """The summary's column of the best solution's field `key` (None without a best)."""
    best = lambda line: getattr(line.best, key, None)  # noqa: E731
    return Column(key, header, best, lambda line: fmt(best(line)))


def _field(key: str) -> Column[Mapping[str, object]]:
    """A submission's `key`: a number sorts as one and shows as SHOWN says for its key (a
    speedup as '2.10x', a Unix time in UTC); anything else as text."""

    def value(item: Mapping[str, object]) -> Sort:
        number, raw = _number(item.get(key)), item.get(key)
        return number if number is not None or raw is None else str(raw)

    def text(item: Mapping[str, object]) -> str:
        number, shown = _number(item.get(key)), SHOWN.get(key)
        return shown(number) if shown and number is not None else _plain_text(item.get(key))

    return Column(key, key, value, text, digits=17)  # 17: any float exactly (a Unix time)


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _plain_text(value: object) -> str:
    return "" if value is None else str(value)


def _number(value: object) -> float | None:
    """`value` where it is a finite number, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _row_column(name: str) -> Column[report.TableRow]:
    """A problem table's column: the TableRow field `name`, headed and written as the markdown
    table heads and writes it."""

    def text(row: report.TableRow) -> str:
        if name in ("speedup", "vs_compile"):
            return report._ratio_cell(vars(row), name)
        return report._format(name, getattr(row, name))

    return Column(name, report.COLUMNS.get(name, name), lambda row: getattr(row, name), text)


ROW_FIELDS = ("solution", "status", "shape", "speedup", "median_us", "ref_median_us")
PROBLEM_COLUMNS = [_row_column(name) for name in (*ROW_FIELDS, "vs_compile", "sol_score", "flags")]
SUMMARY_COLUMNS: list[Column[ProblemLine]] = [
    Column("problem", "problem", lambda line: line.problem),
    Column("best", "best solution", lambda line: line.best.solution if line.best else ""),
    _best_column("score", "score", summary._times),
    _best_column("vs_compile", "vs compile", summary._times),
    _best_column("sol_share", "of SOL", summary._percent),
    _best_column("sol_score", "SOL score", summary._plain),
    Column("solutions", "solutions", lambda line: sum(line.statuses.values())),
    Column("ok", "ok", lambda line: line.statuses[verdicts.OK]),
    Column("statuses", "statuses", lambda line: _counts(line.statuses)),
    Column("notes", "notes", lambda line: "; ".join(line.notes)),
]
SHOWN: dict[str, Callable[[float], str]] = {"speedup": summary._times, "submitted": _utc}
SUBMISSION_COLUMNS = [
    _field(key) for key in ("id", "problem", "solution", "state", "status", "speedup", "submitted")
]


def _counts(statuses: Counter[str]) -> str:
    """'ok 3, incorrect 1': most common first."""
    return ", ".join(f"{status} {count}" for status, count in statuses.most_common())


def page_html(
    records: list[RunRecord],
    title: str,
    live: Sequence[Mapping[str, object]] | None = None,
    charts: Collection[str] = (),
) -> str:
    """One self-contained HTML document of a results folder's records.

    `records`: the folder's run log as harness.record.read gives it (oldest first). `title`:
    plain text, escaped here. `live`: the HTTP service's submissions, each a mapping with the
    keys id, problem, solution, state, status, detail, speedup (a number or None) and
    submitted; given, the page shows them first and reloads itself every REFRESH_S seconds.
    `charts`: the file names beside the page that exist (`<problem>.svg`); a problem whose
    chart is among them shows it. The same arguments give the same bytes (nothing is dated).
    """
    data: dict[str, object] = {
        "about": _about(records),
        "summary": _summary(records),
        "problems": _problems(records, charts),
        "runs": _runs(records),
        "legend": _legend(),
        "live": None if live is None else _table(SUBMISSION_COLUMNS, live, _submission_more),
    }
    return _document(title, _embedded(data), refresh=live is not None)


def write_page(folder: Path, records: list[RunRecord]) -> Path:
    """Re-render `<folder>/index.html` from `records` (its run log, as harness.record.read
    gives it), atomically; returns its path. Shows the charts found beside it. The caller holds
    the folder's lock (harness.results.rendering)."""
    newest = report.newest(records)
    where = newest.machine.gpu if newest and newest.machine.gpu else folder.name
    charts = {path.name for path in folder.glob("*.svg")}
    path = folder / PAGE_NAME
    codec.write_atomic(path, page_html(records, f"Results on {where}", charts=charts))
    return path


def _table(
    columns: Sequence[Column[R]], rows: Sequence[R], more: Callable[[R], Pairs] | None = None
) -> dict[str, object]:
    """A table as the page's data holds it: its columns' keys and headings, and per row its
    cells and, with `more`, the (label, text) pairs its details show."""

    def line(row: R) -> dict[str, object]:
        cells = [column.cell(row) for column in columns]
        return {"cells": cells, "more": more(row)} if more else {"cells": cells}

    return {
        "columns": [{"key": c.key, "header": c.header} for c in columns],
        "rows": [line(row) for row in rows],
    }


def _about(records: list[RunRecord]) -> str:
    """Where the records come from, in a line."""
    newest = report.newest(records)
    if newest is None:
        return "No records yet."
    machine, runs = newest.machine, len({r.run_id for r in records})
    versions = (("torch", machine.torch), ("cuda", machine.cuda), ("driver", machine.driver))
    env = "".join(f", {name} {value}" for name, value in versions if value)
    return (
        f"{len(records)} records of {runs} runs on {machine.gpu or 'CPU'}; newest run "
        f"{newest.run_id} at {report._short_time(newest.time)} UTC{env}. Each table shows the "
        "latest record of each solution, as summary.md does."
    )


def _summary(records: list[RunRecord]) -> dict[str, object]:
    """The summary table (a line per problem) and the lines over all problems: fast_p and
    the geometric mean of the best scores."""
    rows = summary.summary_rows(records)
    best = summary.best_per_problem(rows)
    latest = summary.latest_records(records)
    weak, refused = summary.weak_problems(latest), summary.not_judged(latest)
    lines = [
        ProblemLine(
            problem=problem,
            best=row,
            statuses=Counter(r.status for r in rows if r.problem == problem),
            notes=_problem_notes(problem, weak, refused),
        )
        for problem, row in best.items()
    ]
    scores = [row.score for row in best.values() if row is not None and row.score is not None]
    overall = [f"{len(best)} problem(s), {len(rows)} solution(s)"]
    for p in summary.FAST_P if best else ():
        overall.append(f"fast_{p:g} {round(summary.fast_p(best, p) * len(best))} of {len(best)}")
    if scores:
        overall.append(f"geomean of the best scores {summary._times(geomean(scores))}")
    return {"table": _table(SUMMARY_COLUMNS, lines), "overall": "; ".join(overall)}


def _problem_notes(
    problem: str, weak: dict[str, RunRecord], refused: dict[str, str]
) -> tuple[str, ...]:
    """Why a problem was refused, or what its audit found weak in it."""
    found = [f"refused: {refused[problem]}"] if problem in refused else []
    findings = weak[problem].weaknesses if problem in weak else ()
    return (*found, *(f"weak problem: {finding.check}" for finding in findings))


def _problems(records: list[RunRecord], charts: Collection[str]) -> list[dict[str, object]]:
    """Each problem's table, as its markdown table shows it, and its chart where there is one."""
    problems: list[dict[str, object]] = []
    for problem in sorted({r.problem for r in records}):
        shown = report.latest_per_solution(records, problem)
        newest = report.newest(shown)
        chart = f"{problem}.svg"
        problems.append(
            {
                "name": problem,
                "chart": chart if chart in charts else None,
                "notes": [f"{f.check}: {f.message}" for f in newest.weaknesses] if newest else [],
                "table": _table(PROBLEM_COLUMNS, report.table_rows(shown), _row_more),
            }
        )
    return problems


def _row_more(row: report.TableRow) -> Pairs:
    """A row's details: what its status means, its detail and warnings, the per-call speedup,
    the spreads, the timer, and where the row came from; only what the row has."""
    pairs = [
        ("status", f"{row.status}: {MEANINGS.get(row.status, '')}"),
        ("detail", row.detail),
        ("warnings", row.warnings),
        ("per call", report._ratio_cell(vars(row), "per_call_speedup")),
        ("IQR", report._format("iqr_pct", row.iqr_pct)),
        ("eager's IQR", report._format("iqr_pct", row.ref_iqr_pct)),
        ("samples", report._format("n", row.n)),
        ("of SOL", report._format("sol_pct", row.sol_pct)),
        ("timer", ", ".join(f"{k} {v}" for k, v in (("mode", row.mode), ("stop", row.stop)) if v)),
        ("solution", row.solution_path),
        ("log", row.log or ""),
        ("run", row.run_id),
        ("time (UTC)", row.when),
    ]
    return [[label, text] for label, text in pairs if text]


def _submission_more(item: Mapping[str, object]) -> Pairs:
    detail = _plain_text(item.get("detail"))
    return [["detail", detail]] if detail else []


def _runs(records: list[RunRecord]) -> list[dict[str, object]]:
    """Each run, newest first: its id, when it started (UTC) and each timed shape of its ok
    records as [problem, solution, shape, speedup, low, high]; a solution recorded twice in
    one run keeps its last record. A solution is named by its stem, or by its path where two
    of a problem's files share the stem (as the summary names them)."""
    by_run: dict[str, list[RunRecord]] = {}
    for record in records:
        by_run.setdefault(record.run_id, []).append(record)
    paths = {(r.problem, r.solution, r.solution_path) for r in records}
    stems = Counter((problem, stem) for problem, stem, _ in paths)
    runs = sorted(by_run.values(), key=lambda run: min(r.time for r in run), reverse=True)
    return [
        {
            "id": run[0].run_id,
            "time": report._short_time(min(r.time for r in run)),
            "rows": list(_run_shapes(run, stems).values()),
        }
        for run in runs
    ]


def _run_shapes(
    run: list[RunRecord], stems: Counter[tuple[str, str]]
) -> dict[tuple[str, str, str], list[object]]:
    """`_runs`' rows of one run, keyed by (problem, solution, shape); `stems` counts the
    paths of each (problem, stem)."""
    shapes: dict[tuple[str, str, str], list[object]] = {}
    for record in run:
        if record.status != verdicts.OK:
            continue
        unique = stems[record.problem, record.solution] == 1
        name = record.solution if unique else record.solution_path
        for bench in record.benchmarks:
            speedup = report.bench_speedup(bench)
            key = (record.problem, name, report.bench_label(bench))
            values = (speedup.value, speedup.low, speedup.high)
            shapes[key] = [*key, *(_round(v, DIGITS) for v in values)]
    return shapes


def _round(value: float, digits: int) -> float | None:
    """`value` to `digits` significant digits (a smaller page); None for nan and inf."""
    return float(f"{value:.{digits}g}") if math.isfinite(value) else None


def _legend() -> Pairs:
    """What each status and each flag means (harness.verdicts)."""
    statuses = [[f"status {name}", meaning] for name, meaning in verdicts.MEANING.items()]
    return statuses + [[f"flag {name}", rule.meaning] for name, rule in verdicts.FLAGS.items()]


def _embedded(data: dict[str, object]) -> str:
    """`data` as JSON safe inside a <script> element: no '<', '>' or '&' left to end it."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def _digest(text: str) -> str:
    """A CSP source that lets exactly `text` run as an inline script or style."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def _document(title: str, data: str, refresh: bool) -> str:
    """The page around the data: head, the empty sections the script fills, and the script."""
    scripts, styles = _digest(SCRIPT), _digest(STYLE)
    policy = f"default-src 'none'; script-src {scripts}; style-src {styles}; img-src 'self'"
    reload = f'<meta http-equiv="refresh" content="{REFRESH_S}">\n' if refresh else ""
    name = html.escape(title)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="{policy}">
{reload}<title>{name}</title>
<style>{STYLE}</style>
</head><body>
<h1>{name}</h1>
<p id="about"></p><nav id="nav"></nav>
<section id="live" hidden><h2>Submissions</h2><table id="submissions"></table></section>
<section><h2 id="top">Summary</h2><p id="overall"></p><table id="summary"></table></section>
<div id="problems"></div>
<section><h2 id="runs">Compare two runs</h2>
<p><label>old <select id="old"></select></label> <label>new <select id="new"></select></label>
<span id="compared"></span></p><table id="compare"></table></section>
<section><h2 id="meanings">Statuses and flags</h2><dl id="legend"></dl></section>
<noscript>This page needs JavaScript; summary.md and each problem's .md have the tables.</noscript>
<script type="application/json" id="data">{data}</script>
<script>{SCRIPT}</script>
</body></html>
"""


STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222} img{max-width:100%}
table{border-collapse:collapse;margin:.5em 0 1.5em} dt{font-weight:600}
th,td{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}
th{background:#eee;cursor:pointer;white-space:nowrap} td.num{text-align:right;white-space:nowrap}
th[aria-sort=ascending]::after{content:" \\25B2"} th[aria-sort=descending]::after{content:" \\25BC"}
td[data-col=flags]{max-width:30em;font-size:12px} nav a{margin-right:1em;color:#06c;cursor:pointer}
dl{display:grid;grid-template-columns:max-content auto;gap:0 1em;margin:.3em 0}
dd{margin:0;white-space:pre-wrap;overflow-wrap:anywhere;max-width:70em}
"""

SCRIPT = """
"use strict";
const DATA = JSON.parse(document.getElementById("data").textContent);
const TABLES = {}, $ = (id) => document.getElementById(id);
const pair = (cell) => (Array.isArray(cell) ? cell : [cell, cell]);
const blank = (value) => value === null || value === undefined || value === "";

function add(parent, tag, text) {
  const node = parent.appendChild(document.createElement(tag));
  if (!blank(text)) node.textContent = String(text);
  return node;
}

function before(a, b) {
  if (typeof a === "number" && typeof b === "number") return a - b;
  return String(a).localeCompare(String(b), undefined, {numeric: true});
}

function ordered(rows, at, descending) {
  return rows.slice().sort((x, y) => {
    const a = pair(x.cells[at])[1], b = pair(y.cells[at])[1];
    if (blank(a) || blank(b)) return blank(a) - blank(b);
    return descending ? before(b, a) : before(a, b);
  });
}

function table(id, data) {
  const {key = null, descending = false} = TABLES[id] || {};
  TABLES[id] = {columns: data.columns, rows: data.rows, key, descending};
  const node = $(id);
  node.replaceChildren();
  const head = node.createTHead().insertRow();
  node.createTBody();
  for (const column of data.columns) {
    const th = add(head, "th", column.header);
    th.dataset.key = column.key;
    th.title = "sort: #sort=" + id + ":" + column.key;
    th.addEventListener("click", () => clicked(id, column.key));
  }
  if (data.rows.some((row) => row.more)) add(head, "th", "details");
  fill(id);
}

function fill(id) {
  const {columns, rows, key, descending} = TABLES[id];
  const at = columns.findIndex((column) => column.key === key), node = $(id);
  for (const th of node.tHead.rows[0].cells) {
    if (th.dataset.key !== key) th.removeAttribute("aria-sort");
    else th.setAttribute("aria-sort", descending ? "descending" : "ascending");
  }
  node.tBodies[0].replaceChildren();
  for (const row of at < 0 ? rows : ordered(rows, at, descending)) {
    const tr = node.tBodies[0].insertRow();
    row.cells.forEach((cell, i) => {
      const [text, value] = pair(cell), td = add(tr, "td", text);
      td.dataset.col = columns[i].key;
      if (typeof value === "number") [td.dataset.value, td.className] = [String(value), "num"];
    });
    if (row.more) details(add(tr, "td"), row.more);
  }
}

function describe(list, pairs) {
  for (const [label, text] of pairs) [add(list, "dt", label), add(list, "dd", text)];
}

function details(td, more) {
  if (!more.length) return;
  const box = add(td, "details");
  add(box, "summary", "more");
  describe(add(box, "dl"), more);
}

function sortBy(id, key, descending) {
  const state = TABLES[id];
  if (!state || !state.columns.some((column) => column.key === key)) return;
  [state.key, state.descending] = [key, descending];
  fill(id);
}

function clicked(id, key) {
  const descending = TABLES[id].key === key && !TABLES[id].descending;
  sortBy(id, key, descending);
  remember("sort", id + ":" + (descending ? "-" : "") + key);
}

function fragment() {
  const parts = {};
  for (const part of location.hash.slice(1).split("&")) {
    const [name, ...value] = part.split("=");
    if (value.length) parts[decodeURIComponent(name)] = decodeURIComponent(value.join("="));
  }
  return parts;
}

function remember(name, value) {
  const parts = {...fragment(), [name]: value};
  const text = Object.entries(parts).map(([k, v]) => k + "=" + v);
  history.replaceState(null, "", "#" + text.join("&"));
}

function applyFragment() {
  const parts = fragment();
  if (parts.compare) choose(...parts.compare.split(","));
  for (const spec of (parts.sort || "").split(",")) {
    const at = spec.lastIndexOf(":"), key = spec.slice(at + 1), descending = key[0] === "-";
    if (at > 0) sortBy(spec.slice(0, at), descending ? key.slice(1) : key, descending);
  }
}

function speedup(value, low, high) {
  if (value === null) return ["", null];
  const interval = low === null ? "" : " [" + low.toFixed(2) + ", " + high.toFixed(2) + "]";
  return [value.toFixed(2) + "x" + interval, value];
}

function shapes(id) {
  const run = DATA.runs.find((each) => each.id === id);
  return new Map((run ? run.rows : []).map((row) => [JSON.stringify(row.slice(0, 3)), row]));
}

function compare() {
  const rows = [], earlier = shapes($("old").value);
  for (const [key, row] of shapes($("new").value)) {
    const was = earlier.get(key);
    if (!was) continue;
    const ratio = was[3] && row[3] !== null ? row[3] / was[3] : null;
    const cells = [...row.slice(0, 3), speedup(...was.slice(3)), speedup(...row.slice(3))];
    cells.push(ratio === null ? ["", null] : [ratio.toFixed(2) + "x", ratio]);
    rows.push({cells});
  }
  const keys = ["problem", "solution", "shape", "old", "new", "ratio"];
  const headers = ["problem", "solution", "shape", "old speedup", "new speedup", "new / old"];
  table("compare", {columns: keys.map((key, i) => ({key, header: headers[i]})), rows});
  $("compared").textContent = rows.length + " shape(s) timed in both runs";
}

function choose(older, newer, chosen) {
  if (![older, newer].every((id) => DATA.runs.some((run) => run.id === id))) return;
  [$("old").value, $("new").value] = [older, newer];
  compare();
  if (chosen) remember("compare", older + "," + newer);
}

function runs() {
  for (const id of ["old", "new"]) {
    for (const run of DATA.runs) {
      const text = run.time + "  " + run.id + "  (" + run.rows.length + " shapes)";
      add($(id), "option", text).value = run.id;
    }
    $(id).addEventListener("change", () => choose($("old").value, $("new").value, true));
  }
  const [newest, older] = DATA.runs;
  if (newest) [$("old").value, $("new").value] = [(older || newest).id, newest.id];
  compare();
}

function link(target, text) {
  add($("nav"), "a", text).addEventListener("click", () => $(target).scrollIntoView());
}

function problems() {
  for (const problem of DATA.problems) {
    const section = add($("problems"), "section"), heading = add(section, "h2", problem.name);
    heading.id = "heading-" + problem.name;
    for (const note of problem.notes) add(section, "p", "Weak problem: " + note);
    add(section, "table").id = "problem-" + problem.name;
    if (problem.chart) Object.assign(add(section, "img"), {alt: problem.chart, src: problem.chart});
    table("problem-" + problem.name, problem.table);
    link(heading.id, problem.name);
  }
}

$("about").textContent = DATA.about;
$("overall").textContent = DATA.summary.overall;
link("top", "summary");
table("summary", DATA.summary.table);
$("live").hidden = !DATA.live;
if (DATA.live) table("submissions", DATA.live);
problems();
link("runs", "compare runs");
link("meanings", "statuses and flags");
runs();
describe($("legend"), DATA.legend);
applyFragment();
window.addEventListener("hashchange", applyFragment);
"""
