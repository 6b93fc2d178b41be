"""run.py --serve: the harness as an HTTP service, on FastAPI and uvicorn.

    POST /submissions        queue a solution's source for a problem (202; 200 for a repeated key)
    GET  /submissions/ID     one submission: queued, judging, or done with its verdict
    GET  /submissions?since=T   the caller's submissions made at T (Unix seconds) or later
    GET  /metrics            the queue, what was judged in the last hour, the share spent judging
    GET  /health             no token needed
    GET  /                   the results page (harness.results.page) with the caller's submissions

Every request but /health carries a token: `Authorization: Bearer TOKEN` (the page also takes
`?token=TOKEN` once, then a cookie). The tokens are HARNESS_TOKENS' (comma-separated), else one
drawn at the first start and kept in STATE_DIR/token. Each token sees only its own submissions
and may have QUEUED_MOST waiting at once; a request body is REQUEST_MOST bytes at most. The
sandbox is required: every worker runs in it, or the server does not start.

A submission names a problem (a shipped one, or a file of --problem-dir by its stem) and gives
a solution's source. A reference's source is not taken over HTTP: the reference runs outside
the sandbox. The queue is SQLite (harness.run.submissions) in --state-dir, with each
submission's source; one thread judges it in batches, each a run of harness.run.evaluator, whose
records land in the results folder as any run's do.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import re
import secrets
import shutil
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI
from fastapi import Request as HttpRequest
from fastapi.responses import HTMLResponse, JSONResponse, Response

from harness import codec
from harness.codec import JsonObject
from harness.run.evaluator import NAME, Evaluation, Evaluator, evaluation_of, parsed_flags
from harness.run.submissions import DONE, QUEUED, Store, Submission
from harness.verdicts import UserError

REQUEST_MOST = 1 << 20  # bytes of one request's body
DRAINED_MOST = 16 * REQUEST_MOST  # bytes of an oversized body read to its end before the 413
QUEUED_MOST = 512  # submissions one token may have waiting
BATCH_MOST = 256  # submissions judged as one run
LISTED_MOST = 1000  # submissions one listing returns
DAY_S = 86400.0  # the page shows the submissions of the last day
SETTINGS = {  # the flags a submission may set, and the type of each
    "precision": str,
    "check_only": bool,
    "trials": int,
    "max_samples": int,
    "seed": int,
}
TOKENS_VARIABLE = "HARNESS_TOKENS"
COOKIE = "harness_token"
HARNESS_ERROR = "harness_error"  # not a verdict: the harness failed, submit again
KEY = re.compile(r"[A-Za-z0-9._:-]{1,128}")


@dataclass(frozen=True)
class Request:
    """A submission as a client sends it (JSON): the problem's name, the solution's source,
    the name its file gets (a Python identifier; by default `solution`), the settings it asks
    for (SETTINGS), and an idempotency key of the client's choosing."""

    problem: str
    solution: str
    name: str | None = None
    settings: JsonObject | None = None
    key: str | None = None


class Service:
    """The queue, the judging thread and what the endpoints need (the module doc)."""

    def __init__(self, args: argparse.Namespace) -> None:
        from harness.run.driving import PROBLEMS_DIR

        self.args = args
        self.state_dir: Path = args.state_dir.resolve()
        self.store = Store(self.state_dir / "queue.sqlite")
        self.tokens = load_tokens(self.state_dir)
        self.problem_dirs = [PROBLEMS_DIR, *([args.problem_dir] if args.problem_dir else [])]
        self.wake = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._judge_loop, name="judge", daemon=True)
        self._folder: Path | None = None

    def start(self) -> str:
        """Recover what a killed server left being judged, start judging; one line saying so."""
        finished, again = self.store.recover(self.recorded)
        self.thread.start()
        return f"queue {self.state_dir / 'queue.sqlite'}: {self.store.waiting()} waiting" + (
            f" ({finished} found judged, {again} queued again after a restart)"
            if again or finished
            else ""
        )

    def owner(self, token: str | None) -> str | None:
        """The owner a token stands for (a digest of it), None for a token not known."""
        if not token:
            return None
        for known in self.tokens:
            if hmac.compare_digest(known.encode(), token.encode()):
                return hashlib.sha256(known.encode()).hexdigest()[:16]
        return None

    def submit(self, owner: str, request: Request) -> tuple[Submission, bool]:
        """Queue `request` for `owner` (UserError for a bad one; a repeated key returns the
        first submission and False)."""
        problem = self.problem(request.problem)
        flags = submission_flags(request.settings or {})
        name = request.name or "solution"
        if not NAME.fullmatch(name):
            raise UserError(f"name {name!r}: use letters, digits and _ (64 at most)")
        if request.key is not None and not KEY.fullmatch(request.key):
            raise UserError("key: 1 to 128 letters, digits or . _ : -")
        if self.store.waiting(owner) >= QUEUED_MOST:
            raise Refused(
                429, f"{QUEUED_MOST} submissions of this token are waiting: poll them first"
            )
        submission_id = f"s{time.strftime('%Y%m%d%H%M%S')}{secrets.token_hex(4)}"
        path = self.state_dir / "solutions" / submission_id / f"{name}.py"
        path.parent.mkdir(parents=True)
        path.write_text(request.solution, encoding="utf-8")
        queued = Submission(
            submission_id, owner, request.key, problem, str(path), flags, QUEUED, time.time()
        )
        added, created = self.store.add(queued)
        if not created:  # the key was used: the first submission stands
            shutil.rmtree(path.parent)
        self.wake.set()
        return added, created

    def problem(self, name: str) -> str:
        """The reference a submission's problem name stands for (UserError if none)."""
        from harness.run.discovery import REFERENCE_FILE

        if not NAME.fullmatch(name):
            raise UserError(f"problem {name!r}: give a problem's name (letters, digits, _)")
        for folder in self.problem_dirs:
            if (folder / name / REFERENCE_FILE).is_file():
                return str((folder / name).resolve())
            if (folder / f"{name}.py").is_file():
                return str((folder / f"{name}.py").resolve())
        raise UserError(f"problem {name!r}: no such problem on this server")

    def recorded(self, submission: Submission) -> JsonObject | None:
        """The verdict the results folder holds for `submission`'s file, where a run recorded
        one (a server killed after recording it, before the queue heard)."""
        from harness import record

        results_dir: Path = self.args.results_dir
        for log in results_dir.glob(f"*/{record.LOG_NAME}"):
            for ran in record.read(log.parent):
                if ran.solution_path == submission.solution:
                    return result_json(evaluation_of(ran))
        return None

    def results_folder(self) -> Path:
        """The results folder this server's runs write (at the default precision)."""
        if self._folder is None:
            import torch

            from harness.run import machine
            from harness.run.flags import settings_for
            from harness.settings import REPO

            settings = settings_for(self.args, None, None)
            described = machine.describe(torch.device(settings.device), REPO)
            self._folder = machine.results_folder(settings, described)
        return self._folder

    def page(self, owner: str) -> str:
        """The results page, with `owner`'s submissions of the last day first."""
        from harness import record
        from harness.results import page

        folder = self.results_folder()
        records = record.read(folder) if (folder / record.LOG_NAME).is_file() else []
        mine = self.store.since(owner, time.time() - DAY_S, LISTED_MOST)
        live = [shown(s, whole=False) for s in reversed(mine)]
        charts = {path.name for path in folder.glob("*.svg")}
        return page.page_html(records, f"kernel harness: {folder.name}", live, charts)

    def _judge_loop(self) -> None:
        while not self.stop.is_set():
            batch = self.store.take(BATCH_MOST)
            if not batch:
                self.wake.wait(1.0)
                self.wake.clear()
                continue
            started = time.time()
            for submission, result in zip(batch, self.judge(batch), strict=True):
                self.store.finish(submission.id, result)
            self.store.batch(started, time.time())

    def judge(self, batch: list[Submission]) -> list[JsonObject]:
        """The verdicts of `batch` (one set of settings), judged as one run; a harness
        failure is each one's `harness_error`, never a verdict on the solutions."""
        args = argparse.Namespace(**vars(self.args))
        for name, value in batch[0].settings.items():
            setattr(args, name, value)
        evaluator = Evaluator(args=args)
        pairs = [(Path(s.problem), Path(s.solution)) for s in batch]
        try:
            return [result_json(e) for e in evaluator.evaluate_many(pairs)]  # type: ignore[arg-type]
        except Exception as err:  # the harness's failure: the server goes on, and says so
            traceback.print_exc()
            failed: JsonObject = {
                "status": HARNESS_ERROR,
                "detail": f"harness error: {err}",
                "speedup": None,
            }
            return [failed for _ in batch]


class Refused(Exception):
    """A request refused with an HTTP status other than 400."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def submission_flags(given: JsonObject) -> JsonObject:
    """The settings a submission asks for, each of SETTINGS and of its type, checked as
    run.py checks its flags (UserError naming the bad one)."""
    unknown = sorted(set(given) - set(SETTINGS))
    if unknown:
        raise UserError(
            f"settings: {', '.join(unknown)} cannot be set here; use {', '.join(SETTINGS)}"
        )
    for name, value in given.items():
        kind = SETTINGS[name]
        if type(value) is not kind:
            raise UserError(f"settings: {name} takes a {kind.__name__}, not {value!r}")
    parsed_flags(given, "settings")  # the values alone, as run.py's flags
    return dict(given)


def result_json(evaluation: Evaluation) -> JsonObject:
    """An Evaluation as the service answers it: its verdict, speedups and the whole record."""
    return {
        "status": evaluation.status,
        "detail": evaluation.detail,
        "speedup": evaluation.speedup,
        "speedups": [[s.value, s.low, s.high] for s in evaluation.speedups],
        "sol_score": evaluation.sol_score,
        "record": codec.encode(evaluation.record) if evaluation.record else None,
    }


def shown(submission: Submission, whole: bool = True) -> JsonObject:
    """A submission as the service answers it (without its record unless `whole`)."""
    result = dict(submission.result or {})
    if not whole:
        result.pop("record", None)
    return {
        "id": submission.id,
        "key": submission.key,
        "problem": Path(submission.problem).stem,
        "solution": Path(submission.solution).stem,
        "settings": submission.settings,
        "state": submission.state,
        "submitted": submission.submitted,
        "started": submission.started,
        "finished": submission.finished,
        **(
            {"status": submission.status, "detail": submission.detail}
            if submission.state == DONE
            else {}
        ),
        **result,
    }


def load_tokens(state_dir: Path) -> list[str]:
    """HARNESS_TOKENS' tokens, else the one kept in `state_dir`/token (drawn on first use,
    readable by its owner alone)."""
    given = [t.strip() for t in os.environ.get(TOKENS_VARIABLE, "").split(",") if t.strip()]
    if given:
        return given
    path = state_dir / "token"
    if not path.exists():
        state_dir.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as out:
            out.write(secrets.token_urlsafe(24) + "\n")
    return [path.read_text().strip()]


def check_sandbox(args: argparse.Namespace) -> None:
    """The service judges in the sandbox only: --sandbox off is refused, auto made required."""
    if args.sandbox == "off":
        raise UserError(
            "--serve judges code sent over the network and needs the sandbox: drop --sandbox off"
        )
    args.sandbox = "required"


def make_app(service: Service) -> FastAPI:
    """The FastAPI application of `service` (the module doc lists its endpoints)."""
    app = FastAPI(title="kernel harness", docs_url=None, redoc_url=None, openapi_url=None)

    def owner_of(request: HttpRequest, page: bool = False) -> str:
        said = request.headers.get("authorization", "")
        token = said.removeprefix("Bearer ").strip() if said.startswith("Bearer ") else None
        if page:
            token = token or request.query_params.get("token") or request.cookies.get(COOKIE)
        owner = service.owner(token)
        if owner is None:
            why = "a token is required" if not token else "this token is not known here"
            raise Refused(401, f"{why}: send 'Authorization: Bearer TOKEN'")
        return owner

    @app.exception_handler(Refused)
    async def refused(request: HttpRequest, err: Refused) -> Response:
        return JSONResponse({"error": str(err)}, status_code=err.status)

    @app.exception_handler(UserError)
    async def bad_request(request: HttpRequest, err: UserError) -> Response:
        return JSONResponse({"error": str(err)}, status_code=400)

    @app.get("/health")
    def health() -> Response:
        return JSONResponse({"ok": True, "judging": service.thread.is_alive()})

    @app.get("/metrics")
    def metrics(request: HttpRequest) -> Response:
        owner_of(request)
        return JSONResponse(service.store.metrics(time.time()))

    @app.post("/submissions")
    async def submit(request: HttpRequest) -> Response:
        owner = owner_of(request)
        body = await read_body(request)
        submission, created = service.submit(owner, parse_request(body))
        return JSONResponse(shown(submission, whole=False), status_code=202 if created else 200)

    @app.get("/submissions/{submission_id}")
    def one(submission_id: str, request: HttpRequest) -> Response:
        found = service.store.get(submission_id, owner_of(request))
        if found is None:
            raise Refused(404, f"no submission {submission_id!r} of this token")
        return JSONResponse(shown(found))

    @app.get("/submissions")
    def listed(request: HttpRequest, since: float = 0.0) -> Response:
        found = service.store.since(owner_of(request), since, LISTED_MOST)
        return JSONResponse({"submissions": [shown(s, whole=False) for s in found]})

    @app.get("/")
    def page(request: HttpRequest) -> Response:
        owner = owner_of(request, page=True)
        response = HTMLResponse(service.page(owner))
        token = request.query_params.get("token")
        if token:
            response.set_cookie(COOKIE, token, httponly=True, samesite="strict")
        return response

    @app.get("/{name}.svg")
    def chart(name: str, request: HttpRequest) -> Response:
        owner_of(request, page=True)
        path = service.results_folder() / f"{name}.svg"
        if not NAME.fullmatch(name) or not path.is_file():
            raise Refused(404, f"no chart {name}.svg")
        return Response(path.read_bytes(), media_type="image/svg+xml")

    return app


async def read_body(request: HttpRequest) -> bytes:
    """The request's body, refused (413) past REQUEST_MOST bytes, however it was sent.

    An oversized body of DRAINED_MOST bytes at most is read to its end and dropped before the
    413 goes out, so its sender, still writing, hears the answer instead of a broken pipe; one
    declared larger is refused at once and its connection closed.
    """
    too_large = Refused(413, f"a request's body is {REQUEST_MOST} bytes at most")
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > DRAINED_MOST):
        raise too_large
    body = bytearray()
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received > DRAINED_MOST:
            raise too_large
        if received <= REQUEST_MOST:
            body += chunk
    if received > REQUEST_MOST:
        raise too_large
    return bytes(body)


def parse_request(body: bytes) -> Request:
    """A submission from its JSON body (UserError saying what is wrong with it)."""
    import json

    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserError(f"the body is not JSON: {err}") from None
    if not isinstance(data, dict):
        raise UserError("the body must be a JSON object with 'problem' and 'solution'")
    fields = {"problem": str, "solution": str, "name": str, "settings": dict, "key": str}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise UserError(f"unknown field(s) {', '.join(unknown)}; known: {', '.join(fields)}")
    for name in ("problem", "solution"):
        if name not in data:
            raise UserError(f"missing field {name!r}: a submission needs 'problem' and 'solution'")
    for name, value in data.items():
        if value is not None and not isinstance(value, fields[name]):
            raise UserError(f"field {name!r} takes a {fields[name].__name__}")
    return Request(**data)


def serve(args: argparse.Namespace) -> int:
    """run.py --serve: judge submissions over HTTP until interrupted."""
    import uvicorn

    check_sandbox(args)
    service = Service(args)
    print(service.start(), flush=True)
    where = f"http://{args.host}:{args.port}"
    shown_token = (
        "HARNESS_TOKENS" if os.environ.get(TOKENS_VARIABLE) else service.state_dir / "token"
    )
    print(f"serving on {where} (token: {shown_token}); Ctrl-C stops", flush=True)
    try:
        uvicorn.run(make_app(service), host=args.host, port=args.port, log_level="warning")
    finally:
        service.stop.set()
    return 0
