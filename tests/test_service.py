"""run.py --serve as its clients meet it: a real server on loopback, C++ and Python solutions of
the toy problem judged on the CPU, tokens, bad requests, concurrent clients, and a server killed
with work queued and started again."""

from __future__ import annotations

import ast
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import record
from harness.run import service
from tests.conftest import REPO, toy_solution
from tests.test_page import browser, chromium, dom_tables

__all__ = ["browser"]  # a fixture of tests/test_page.py, used here too

TOKENS = ("first-token", "second-token")
QUICK = ["--device", "cpu", "--max-samples", "5", "--trials", "2", "--timeout", "60"]
WAIT_S = 300.0
WRONG = Path(toy_solution("good")).read_text().replace("x * self.scale + 1", "x * self.scale - 1")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Server:
    """`python run.py --serve` on a free loopback port, writing under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        folders = ["--state-dir", "state", "--results-dir", "results", "--log-dir", "logs"]
        command = [sys.executable, str(REPO / "run.py"), "--serve", "--port", str(self.port)]
        command += [*folders, "--problem-dir", str(REPO / "tests" / "fixtures"), *QUICK]
        env = {**os.environ, service.TOKENS_VARIABLE: ",".join(TOKENS)}
        with open(self.root / f"server-{self.starts}.log", "wb") as log:
            self.process = subprocess.Popen(
                command, cwd=self.root, stdout=log, stderr=log, env=env, start_new_session=True
            )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if self.call("GET", "/health", token=None)[0] == 200:
                    return
            except OSError:
                time.sleep(0.3)
        raise AssertionError(self.log())

    def kill(self) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)  # the server and every worker it started
        self.process.wait()

    def log(self) -> str:
        return "".join(p.read_text() for p in sorted(self.root.glob("server-*.log")))

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        token: str | None = TOKENS[0],
        raw: bytes | None = None,
    ) -> tuple[int, Any]:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", data=data, method=method, headers=headers
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, _decoded(answer.read(), answer.headers)
        except urllib.error.HTTPError as err:
            return err.code, _decoded(err.read(), err.headers)

    def submit(self, solution: str, key: str | None = None, token: str = TOKENS[0]) -> dict:
        body = {"problem": "toy", "solution": solution, **({"key": key} if key else {})}
        status, answer = self.call("POST", "/submissions", body, token=token)
        assert status in (200, 202), answer
        return answer

    def verdict(self, submission_id: str, token: str = TOKENS[0]) -> dict:
        """The submission once done (polled with back-off)."""
        deadline, pause = time.monotonic() + WAIT_S, 0.2
        while time.monotonic() < deadline:
            status, answer = self.call("GET", f"/submissions/{submission_id}", token=token)
            assert status == 200, answer
            if answer["state"] == "done":
                return answer
            time.sleep(pause)
            pause = min(pause * 1.5, 2.0)
        raise AssertionError(f"{submission_id} not judged in {WAIT_S} s:\n{self.log()}")


def _decoded(body: bytes, headers: Any) -> Any:
    if "json" in headers.get("content-type", ""):
        return json.loads(body)
    return body.decode()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = Server(tmp_path_factory.mktemp("served"))
    running.start()
    try:
        yield running
    finally:
        running.kill()


def source(name: str) -> str:
    return Path(toy_solution(name)).read_text()


def test_a_cpp_solution_submitted_is_judged_and_recorded_as_a_run_records_it(
    server: Server,
) -> None:
    submitted = server.submit(source("cpp_extension"))
    assert submitted["state"] == "queued"
    done = server.verdict(submitted["id"])
    assert done["status"] == "ok", done
    assert done["speedup"] > 0 and len(done["speedups"]) == len(done["record"]["benchmarks"])
    assert (
        done["record"]["checks"] == 3 * 2
        and done["record"]["settings"]["limits"]["sandbox"] == "required"
    )
    (log,) = (server.root / "results").glob(f"*/{record.LOG_NAME}")
    recorded = [
        r for r in record.read(log.parent) if r.solution_path == done["record"]["solution_path"]
    ]
    assert len(recorded) == 1 and recorded[0].status == "ok"


def test_a_wrong_solution_is_incorrect_and_the_listing_shows_both(server: Server) -> None:
    before = time.time()
    done = server.verdict(server.submit(WRONG)["id"])
    assert done["status"] == "incorrect" and "elements differ" in done["detail"], done
    status, listed = server.call("GET", f"/submissions?since={before - 1}")
    assert status == 200 and done["id"] in [s["id"] for s in listed["submissions"]]
    assert all("record" not in s for s in listed["submissions"])  # the listing stays small


def test_a_repeated_key_returns_the_first_submission(server: Server) -> None:
    first = server.submit(source("good"), key="sample-17")
    again = server.submit(WRONG, key="sample-17")
    assert again["id"] == first["id"]
    assert server.verdict(first["id"])["status"] == "ok"  # the first source, not the second


def test_every_request_but_health_needs_a_known_token(server: Server) -> None:
    assert server.call("GET", "/health", token=None)[0] == 200
    for path in ("/metrics", "/submissions", "/submissions/x", "/"):
        for token in (None, "not-a-token"):
            status, answer = server.call("GET", path, token=token)
            assert status == 401 and "token" in answer["error"], (path, answer)
    status, answer = server.call(
        "POST", "/submissions", {"problem": "toy", "solution": WRONG}, token=None
    )
    assert status == 401


def test_a_token_sees_only_its_own_submissions(server: Server) -> None:
    mine = server.submit(source("good"), token=TOKENS[1])
    status, answer = server.call("GET", f"/submissions/{mine['id']}", token=TOKENS[0])
    assert status == 404 and "no submission" in answer["error"]
    assert server.call("GET", f"/submissions/{mine['id']}", token=TOKENS[1])[0] == 200


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        (b"{not json", 400, "not JSON"),
        (b"[1, 2]", 400, "JSON object"),
        (json.dumps({"problem": "toy"}).encode(), 400, "missing field 'solution'"),
        (json.dumps({"problem": "nope", "solution": "x"}).encode(), 400, "no such problem"),
        (json.dumps({"problem": "../toy", "solution": "x"}).encode(), 400, "problem's name"),
        (
            json.dumps({"problem": "toy", "solution": "x", "extra": 1}).encode(),
            400,
            "unknown field",
        ),
        (
            json.dumps(
                {"problem": "toy", "solution": "x", "settings": {"device": "cuda"}}
            ).encode(),
            400,
            "cannot be set",
        ),
        (
            json.dumps({"problem": "toy", "solution": "x", "settings": {"trials": 0}}).encode(),
            400,
            "--trials",
        ),
        (json.dumps({"problem": "toy", "solution": "x", "name": "a/b"}).encode(), 400, "name"),
        (b" " * service.REQUEST_MOST, 400, "not JSON"),
        (b"x" * (service.REQUEST_MOST + 1), 413, "at most"),
        (b"x" * (4 * service.REQUEST_MOST), 413, "at most"),
    ],
)
def test_a_bad_request_gets_a_4xx_with_one_clear_message(
    server: Server, body: bytes, status: int, words: str
) -> None:
    answered, answer = server.call("POST", "/submissions", raw=body)
    assert answered == status and words in answer["error"], answer
    assert "\n" not in answer["error"]


def test_an_oversized_chunked_body_gets_a_413(server: Server) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    chunks = (b"x" * (1 << 16) for _ in range(service.REQUEST_MOST // (1 << 16) + 1))
    headers = {"Authorization": f"Bearer {TOKENS[0]}", "Content-Type": "application/json"}
    connection.request("POST", "/submissions", body=chunks, headers=headers, encode_chunked=True)
    answer = connection.getresponse()
    assert answer.status == 413 and "at most" in json.loads(answer.read())["error"]
    connection.close()


def test_concurrent_clients_each_get_their_own_verdicts(server: Server) -> None:
    verdicts: dict[str, str] = {}

    def client(index: int) -> None:
        wrong = index % 2 == 1
        submitted = server.submit(WRONG if wrong else source("good"), key=f"client-{index}")
        verdicts[f"{index}:{'incorrect' if wrong else 'ok'}"] = server.verdict(submitted["id"])[
            "status"
        ]

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
    assert len(verdicts) == 8
    assert all(key.split(":")[1] == status for key, status in verdicts.items()), verdicts


def test_the_page_shows_the_submissions_and_the_results(server: Server) -> None:
    done = server.verdict(server.submit(source("good"), key="for-the-page")["id"])
    status, html = server.call("GET", f"/?token={TOKENS[0]}", token=None)
    assert status == 200 and "<html" in html.lower()
    assert done["id"] in html and "toy" in html
    status, metrics = server.call("GET", "/metrics")
    assert (
        status == 200
        and metrics["judged_last_hour"] >= 1
        and 0 < metrics["judging_share_last_hour"] <= 1
    )


def test_the_served_page_in_a_browser_shows_a_submitted_row_sorted(
    server: Server, browser: str, tmp_path: Path
) -> None:
    ids = [
        server.verdict(server.submit(source("good"), key=f"page-{i}")["id"])["id"] for i in (1, 2)
    ]
    url = f"http://127.0.0.1:{server.port}/?token={TOKENS[0]}"
    for order, newest_first in (("-submitted", True), ("submitted", False)):
        dom = chromium(
            browser, tmp_path / "profile", "--dump-dom", f"{url}#sort=submissions:{order}"
        )
        shown = [row["id"][0] for row in dom_tables(dom)["submissions"]]
        assert set(ids) <= set(shown), shown
        assert (shown.index(ids[1]) < shown.index(ids[0])) == newest_first, shown
        assert dom_tables(dom)[
            "problem-toy"
        ]  # the results' own table, rendered by the page's script


def test_a_server_killed_with_work_queued_judges_each_submission_once_after_a_restart(
    tmp_path: Path,
) -> None:
    server = Server(tmp_path)
    server.start()
    try:
        ids = [server.submit(source("good") + f"\n# sample {i}\n")["id"] for i in range(6)]
        while server.call("GET", f"/submissions/{ids[0]}")[1]["state"] == "queued":
            time.sleep(0.05)
        server.kill()  # the first batch being judged (or just judged), the rest queued
        server.start()
        done = [server.verdict(i) for i in ids]
    finally:
        server.kill()
    assert [d["status"] for d in done] == ["ok"] * 6, [(d["status"], d["detail"]) for d in done]
    (log,) = (tmp_path / "results").glob(f"*/{record.LOG_NAME}")
    paths = [r.solution_path for r in record.read(log.parent)]
    for answer in done:
        assert paths.count(answer["record"]["solution_path"]) == 1, (answer["id"], paths)
    assert len(paths) == 6
    assert "queued again after a restart" in server.log()


def test_the_service_refuses_to_run_without_the_sandbox(tmp_path: Path) -> None:
    command = [sys.executable, str(REPO / "run.py"), "--serve", "--sandbox", "off"]
    ended = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert ended.returncode == 3 and "needs the sandbox" in ended.stderr, ended.stderr


def test_the_readme_s_submission_runs_as_printed_against_a_server(server: Server) -> None:
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## From Python and over HTTP") : readme.index("## When things")]
    block = section.split("```python")[2].split("```")[0]
    assert "smooth_l1" in block and "served/token" in block and ":8000/" in block
    token = server.root / "readme-token"
    token.write_text(TOKENS[0] + "\n")
    solution = server.root / "my_smooth_l1.py"
    solution.write_text(source("good"))
    script = block.replace('"smooth_l1"', '"toy"').replace("served/token", str(token))
    script = script.replace(":8000/", f":{server.port}/")
    ended = subprocess.run(
        [sys.executable, "-c", script], cwd=server.root, capture_output=True, text=True, timeout=60
    )
    assert ended.returncode == 0, ended.stderr
    answer = ast.literal_eval(ended.stdout.strip())
    assert answer["state"] == "queued" and server.verdict(answer["id"])["status"] == "ok"
