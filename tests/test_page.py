"""The results page (harness.results.page): what its data holds, that no record's text can
become markup, and, in a real headless browser, that its script draws, sorts and compares."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from harness import record as run_log
from harness.record import RunRecord
from harness.results import page, rendering, report, summary
from tests.conftest import REPO
from tests.records_factory import bench, record

H200 = REPO / "results" / "nvidia-h200"
OLD_RUN = "20261130-200741-a673f8"  # run.py --all --compile at f8defa8
NEW_RUN = "20261130-222451-34f8c4"  # the same at e617aef, with --ncu
SCRIPT_BREAK = "</script><script>alert(1)</script>"
IMG_BREAK = "<img src=x onerror=alert(2)>"
DATA = re.compile(r'<script type="application/json" id="data">(.*?)</script>', re.DOTALL)


@pytest.fixture(scope="module")
def committed() -> list[RunRecord]:
    return run_log.read(H200)


def data_of(text: str) -> dict:
    (embedded,) = DATA.findall(text)
    return json.loads(embedded)


def cells(row: dict) -> list[list]:
    """A data row's cells as [text, sort value] pairs."""
    return [cell if isinstance(cell, list) else [cell, cell] for cell in row["cells"]]


def column(table: dict, key: str) -> list:
    at = [c["key"] for c in table["columns"]].index(key)
    return [cells(row)[at][1] for row in table["rows"]]


def runs_newest_first(records: list[RunRecord]) -> list[str]:
    """The run ids of `records`, the run that started last first."""
    started: dict[str, str] = {}
    for each in records:
        started[each.run_id] = min(started.get(each.run_id, each.time), each.time)
    return sorted(started, key=lambda run_id: started[run_id], reverse=True)


def hostile() -> list[RunRecord]:
    """Problem p: a fast solution, a slow one, and one whose name, detail and warnings are
    markup, which failed (so its speedup is blank)."""
    fast = record("p", "fast", [bench(10.0, 30.0)], when="2026-11-29T10:00:00+00:00")
    slow = record("p", "slow", [bench(20.0, 40.0)], when="2026-11-29T10:01:00+00:00")
    evil = record(
        "p", IMG_BREAK, status="incorrect", detail=SCRIPT_BREAK, when="2026-11-29T10:02:00+00:00"
    )
    return [fast, slow, dataclasses.replace(evil, warnings=(IMG_BREAK, "a & b"))]


def test_every_problem_and_the_solutions_its_table_shows_are_in_the_data(
    committed: list[RunRecord],
) -> None:
    data = data_of(page.page_html(committed, "H200"))
    problems = sorted({r.problem for r in committed})
    assert [p["name"] for p in data["problems"]] == problems
    for problem in data["problems"]:
        shown = report.latest_per_solution(committed, problem["name"])
        expected = [(row.solution, row.shape) for row in report.table_rows(shown)]
        table = problem["table"]
        assert list(zip(column(table, "solution"), column(table, "shape"), strict=True)) == expected
        assert problem["chart"] is None  # no chart named as present
    best = summary.best_per_problem(summary.summary_rows(committed))
    lines = data["summary"]["table"]
    assert column(lines, "problem") == problems
    assert column(lines, "best") == [best[p].solution if best[p] else "" for p in problems]
    for problem, score in zip(problems, column(lines, "score"), strict=True):
        assert score == pytest.approx(best[problem].score, rel=1e-4)


def test_the_speedups_and_scores_are_the_markdown_tables_own(committed: list[RunRecord]) -> None:
    data = data_of(page.page_html(committed, "H200"))
    softmax = next(p for p in data["problems"] if p["name"] == "softmax")
    markdown = (H200 / "softmax.md").read_text()
    speedups = [text for text, _ in (cells(row)[3] for row in softmax["table"]["rows"])]
    assert len(speedups) > 5 and all(f"| {text} " in markdown for text in speedups)
    overview = (H200 / summary.SUMMARY_NAME).read_text()
    lines = data["summary"]["table"]["rows"]
    for line in lines:  # as summary.md's "Best per problem": | problem | best | score | ...
        problem, best, score = (re.escape(cells(line)[at][0]) for at in range(3))
        best = best or re.escape("(none ok)")
        assert re.search(rf"^\| {problem} +\| {best} +\| {score} +\|", overview, re.MULTILINE)
    best = summary.best_per_problem(summary.summary_rows(committed))
    fast = round(summary.fast_p(best, 1.0) * len(best))
    assert f"fast_1 {fast} of {len(lines)}" in data["summary"]["overall"]


def test_a_folder_without_records_still_gets_a_page() -> None:
    data = data_of(page.page_html([], "empty"))
    assert data["about"] == "No records yet." and data["problems"] == data["runs"] == []
    assert data["summary"]["table"]["rows"] == []


def test_the_runs_to_compare_are_newest_first_with_each_ok_shape(
    committed: list[RunRecord],
) -> None:
    runs = data_of(page.page_html(committed, "H200"))["runs"]
    assert [run["id"] for run in runs] == runs_newest_first(committed)
    old = next(run for run in runs if run["id"] == OLD_RUN)
    timed = [r for r in committed if r.run_id == OLD_RUN and r.status == "ok"]
    assert len(old["rows"]) == sum(len(r.benchmarks) for r in timed) > 0
    first = timed[0].benchmarks[0]
    assert old["rows"][0][:3] == [timed[0].problem, timed[0].solution, report.bench_label(first)]
    assert old["rows"][0][3] == pytest.approx(report.bench_speedup(first).value, rel=1e-4)


def test_no_string_of_a_record_or_the_title_becomes_markup() -> None:
    text = page.page_html(hostile(), f"title {IMG_BREAK}")
    for markup in (SCRIPT_BREAK, IMG_BREAK, "<script>alert", "<img src=x"):
        assert markup not in text
    assert text.count("</script>") == 2  # the data's and the script's own
    assert "&lt;img src=x onerror=alert(2)&gt;" in text  # the title, escaped by html.escape
    data = data_of(text)  # the JSON round-trips the text exactly
    (evil,) = [r for r in data["problems"][0]["table"]["rows"] if cells(r)[0][0] == IMG_BREAK]
    more = dict(evil["more"])
    assert more["detail"] == SCRIPT_BREAK and more["warnings"] == f"{IMG_BREAK}; a & b"
    assert "innerHTML" not in page.SCRIPT and "insertAdjacentHTML" not in page.SCRIPT


def test_only_the_pages_own_script_and_style_may_run() -> None:
    text = page.page_html(hostile(), "t")
    (policy,) = re.findall(r'http-equiv="Content-Security-Policy" content="([^"]+)"', text)
    (script,) = re.findall(r"<script>(.*?)</script>", text, re.DOTALL)
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in policy and "default-src 'none'" in policy
    assert "unsafe-inline" not in policy


def test_a_blank_sorts_as_null_and_a_number_as_a_number() -> None:
    table = data_of(page.page_html(hostile(), "t"))["problems"][0]["table"]
    assert column(table, "solution") == [IMG_BREAK, "fast", "slow"]  # by name, as the markdown
    assert column(table, "speedup") == [None, pytest.approx(3.0), pytest.approx(2.0)]
    assert column(table, "status") == ["incorrect", "ok", "ok"]


def test_live_submissions_come_first_and_the_page_reloads() -> None:
    live = [
        {"id": 7, "problem": "p", "solution": "s", "state": "done", "status": "ok"}
        | {"detail": SCRIPT_BREAK, "speedup": 2.5, "submitted": 1764410400.0},
        {"id": 8, "problem": "p", "solution": "t", "state": "queued", "status": None}
        | {"detail": None, "speedup": None, "submitted": 1764410460.0},
    ]
    text = page.page_html(hostile(), "t", live=live)
    assert '<meta http-equiv="refresh" content="5">' in text and SCRIPT_BREAK not in text
    table = data_of(text)["live"]
    assert column(table, "id") == [7, 8] and column(table, "speedup") == [2.5, None]
    assert cells(table["rows"][0])[5][0] == "2.50x"
    assert cells(table["rows"][0])[6] == ["2025-11-29 10:00:00", 1764410400.0]  # UTC
    assert table["rows"][0]["more"] == [["detail", SCRIPT_BREAK]] and table["rows"][1]["more"] == []
    still = page.page_html(hostile(), "t")
    assert "refresh" not in still and data_of(still)["live"] is None


def test_rendering_writes_the_page_beside_the_summary_with_its_charts(tmp_path: Path) -> None:
    for each in hostile():
        run_log.append(tmp_path, each)
    (tmp_path / "p.svg").write_text("<svg/>")
    path, records = rendering.render_summary(tmp_path)
    written = tmp_path / page.PAGE_NAME
    assert path.name == summary.SUMMARY_NAME and written.exists()
    assert written.read_text() == page.page_html(
        records, "Results on NVIDIA H200", charts={"p.svg"}
    )
    assert data_of(written.read_text())["problems"][0]["chart"] == "p.svg"


# A real browser: Debian's chromium, headless. CI sets HARNESS_REQUIRE_BROWSER=1 and installs it.
BROWSER_S = 60


@pytest.fixture(scope="module")
def browser() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    why = "no chromium on PATH: the page's script is not run in a browser"
    if os.environ.get("HARNESS_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{why}, and HARNESS_REQUIRE_BROWSER=1")
    pytest.skip(why)


def chromium(browser: str, profile: Path, *args: str) -> str:
    """Run headless chromium with `args`; its stdout."""
    command = [browser, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}"]
    done = subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=BROWSER_S, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


class Tables(HTMLParser):
    """Each table's body rows in a dumped DOM: per row, {column key: (text, data-value)}."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[dict[str, tuple[str, str | None]]]] = {}
        self.table: str | None = None
        self.cell: tuple[str, str | None] | None = None
        self.text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "table":
            self.table = found.get("id") or ""
            self.tables[self.table] = []
        elif tag == "tr" and self.table is not None:
            self.tables[self.table].append({})
        elif tag == "td" and found.get("data-col"):
            self.cell, self.text = (found["data-col"] or "", found.get("data-value")), ""

    def handle_data(self, data: str) -> None:
        self.text += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self.cell and self.table is not None:
            key, value = self.cell
            self.tables[self.table][-1][key] = (self.text, value)
            self.cell = None
        elif tag == "table":
            self.table = None


class Elements(HTMLParser):
    """Every element of a dumped DOM: its tag and attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, dict(attrs)))


def dom_tables(dom: str) -> dict[str, list[dict[str, tuple[str, str | None]]]]:
    parser = Tables()
    parser.feed(dom)
    return {name: [row for row in rows if row] for name, rows in parser.tables.items()}


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the committed H200 folder, rendered (summary and page)."""
    folder = tmp_path_factory.mktemp("page") / "nvidia-h200"
    shutil.copytree(H200, folder, ignore=shutil.ignore_patterns(".lock"))
    rendering.render_summary(folder)
    return folder


def values(rows: list[dict], key: str) -> list[float | None]:
    return [None if row[key][1] is None else float(row[key][1]) for row in rows]


def expected_comparison(records: list[RunRecord], old: str, new: str) -> dict[tuple, float]:
    """(problem, solution, shape) -> new speedup over old, for each shape both runs timed."""

    def speedups(run_id: str) -> dict[tuple, float]:
        return {
            (r.problem, r.solution, report.bench_label(b)): report.bench_speedup(b).value
            for r in records
            if r.run_id == run_id and r.status == "ok"
            for b in r.benchmarks
        }

    before, after = speedups(old), speedups(new)
    return {key: after[key] / before[key] for key in after.keys() & before.keys()}


def test_the_browser_sorts_each_way_from_the_fragment(
    browser: str, shipped: Path, committed: list[RunRecord], tmp_path: Path
) -> None:
    url = (shipped / page.PAGE_NAME).as_uri()
    down = dom_tables(
        chromium(browser, tmp_path / "profile", "--dump-dom", f"{url}#sort=problem-lltm:-speedup")
    )
    up = dom_tables(
        chromium(browser, tmp_path / "profile", "--dump-dom", f"{url}#sort=problem-lltm:speedup")
    )
    shown = report.table_rows(report.latest_per_solution(committed, "lltm"))
    assert len(down["problem-lltm"]) == len(up["problem-lltm"]) == len(shown) > 10
    falling, rising = values(down["problem-lltm"], "speedup"), values(up["problem-lltm"], "speedup")
    assert falling == sorted(falling, reverse=True) and rising == sorted(rising)
    assert falling != rising and sorted(falling) == rising
    assert {row["solution"][0] for row in down["problem-lltm"]} == {row.solution for row in shown}
    problems = sorted({r.problem for r in committed})
    assert all(down[f"problem-{name}"] for name in problems)  # every table drawn
    assert [row["problem"][0] for row in down["summary"]] == problems  # unsorted: as given


def test_the_browser_compares_the_runs_the_fragment_names(
    browser: str, shipped: Path, committed: list[RunRecord], tmp_path: Path
) -> None:
    url = (shipped / page.PAGE_NAME).as_uri()
    fragment = f"#compare={OLD_RUN},{NEW_RUN}&sort=compare:-ratio"
    rows = dom_tables(chromium(browser, tmp_path / "profile", "--dump-dom", url + fragment))[
        "compare"
    ]
    expected = expected_comparison(committed, OLD_RUN, NEW_RUN)
    assert len(rows) == len(expected) > 10
    for row in rows:
        key = (row["problem"][0], row["solution"][0], row["shape"][0])
        assert float(row["ratio"][1] or "nan") == pytest.approx(expected[key], rel=1e-3)
    ratios = values(rows, "ratio")
    assert ratios == sorted(ratios, reverse=True)
    # no fragment: the two newest runs
    newest, before = runs_newest_first(committed)[:2]
    default = dom_tables(chromium(browser, tmp_path / "profile", "--dump-dom", url))["compare"]
    expected = expected_comparison(committed, before, newest)
    assert len(default) == len(expected) > 0
    assert {(row["problem"][0], row["solution"][0], row["shape"][0]) for row in default} == set(
        expected
    )


def test_the_browser_shows_hostile_text_as_text_and_blanks_last(
    browser: str, tmp_path: Path
) -> None:
    folder = tmp_path / "results"
    for each in hostile():
        run_log.append(folder, each)
    rendering.render_summary(folder)
    url = (folder / page.PAGE_NAME).as_uri()
    dom = chromium(browser, tmp_path / "profile", "--dump-dom", f"{url}#sort=problem-p:-speedup")
    rows = dom_tables(dom)["problem-p"]
    assert [row["solution"][0] for row in rows] == ["fast", "slow", IMG_BREAK]
    assert values(rows, "speedup")[2] is None  # the blank last, descending ...
    dom_up = chromium(browser, tmp_path / "profile", "--dump-dom", f"{url}#sort=problem-p:speedup")
    rising = [row["solution"][0] for row in dom_tables(dom_up)["problem-p"]]
    assert rising == ["slow", "fast", IMG_BREAK]  # ... and ascending
    elements = Elements()
    elements.feed(dom)
    assert [tag for tag, _ in elements.found].count("script") == 2
    assert not [
        (tag, attrs) for tag, attrs in elements.found if any(a.startswith("on") for a in attrs)
    ]
    assert not [attrs for tag, attrs in elements.found if tag == "img" and attrs.get("src") == "x"]
    assert IMG_BREAK in dom_tables(dom)["problem-p"][2]["solution"][0]


def test_the_browser_takes_a_screenshot(browser: str, shipped: Path, tmp_path: Path) -> None:
    shot = tmp_path / "page.png"
    url = (shipped / page.PAGE_NAME).as_uri()
    chromium(browser, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1400,2000", url)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000
