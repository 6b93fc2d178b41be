"""The service's queue of submissions, kept in SQLite so that it outlives the process.

A submission goes `queued` -> `judging` -> `done`. `take` moves the oldest queued submissions
that share one set of settings to `judging` in one transaction (a batch is one run, and a run has
one set of settings); `finish` writes each one's verdict. A server killed mid-batch leaves its
submissions `judging`: `recover`, as the next server starts, gives each the verdict a run
already recorded for its file (the results folder's run log is written before the queue is),
and puts the others back in the queue, so every submission is judged and recorded exactly once.

Each submission belongs to the token that made it (`owner`, a digest of the token: the token
itself is not stored); a client-chosen `key` makes a repeated submission return the first.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.codec import JsonObject

QUEUED, JUDGING, DONE = "queued", "judging", "done"
HOUR_S = 3600.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS submissions (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    key TEXT,
    problem TEXT NOT NULL,
    solution TEXT NOT NULL,
    settings TEXT NOT NULL,
    state TEXT NOT NULL,
    submitted REAL NOT NULL,
    started REAL,
    finished REAL,
    status TEXT,
    detail TEXT,
    speedup REAL,
    result TEXT,
    UNIQUE (owner, key)
);
CREATE INDEX IF NOT EXISTS by_state ON submissions (state, submitted);
CREATE TABLE IF NOT EXISTS batches (started REAL NOT NULL, finished REAL NOT NULL);
"""


@dataclass(frozen=True)
class Submission:
    """One submission as the queue holds it. `solution` is its file's path; `settings` the
    flags it asked for (harness.run.service.SETTINGS); `result` the verdict's JSON (the
    Evaluation's fields and the record) once done."""

    id: str
    owner: str
    key: str | None
    problem: str
    solution: str
    settings: JsonObject
    state: str
    submitted: float
    started: float | None = None
    finished: float | None = None
    status: str | None = None
    detail: str | None = None
    speedup: float | None = None
    result: JsonObject | None = None


class Store:
    """The queue in the SQLite file `path` (created with its folder where missing); safe to
    call from several threads."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(SCHEMA)
        self._lock = threading.Lock()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def add(self, submission: Submission) -> tuple[Submission, bool]:
        """Queue `submission`; or, where its owner already used its key, the first one (and
        False: nothing was added)."""
        with self._transaction() as db:
            if submission.key is not None:
                found = db.execute(
                    "SELECT * FROM submissions WHERE owner = ? AND key = ?",
                    (submission.owner, submission.key),
                ).fetchone()
                if found is not None:
                    return _submission(found), False
            db.execute(
                "INSERT INTO submissions (id, owner, key, problem, solution, settings, state, "
                "submitted) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    submission.id,
                    submission.owner,
                    submission.key,
                    submission.problem,
                    submission.solution,
                    json.dumps(submission.settings, sort_keys=True),
                    QUEUED,
                    submission.submitted,
                ),
            )
        return submission, True

    def get(self, submission_id: str, owner: str | None = None) -> Submission | None:
        """The submission `submission_id` (None where missing, or another owner's)."""
        with self._lock:
            row = self._db.execute(
                "SELECT * FROM submissions WHERE id = ?", (submission_id,)
            ).fetchone()
        if row is None or (owner is not None and row["owner"] != owner):
            return None
        return _submission(row)

    def since(self, owner: str, when: float, limit: int) -> list[Submission]:
        """`owner`'s submissions made at `when` or later, oldest first, `limit` at most."""
        with self._lock:
            rows = self._db.execute(
                "SELECT * FROM submissions WHERE owner = ? AND submitted >= ? "
                "ORDER BY submitted LIMIT ?",
                (owner, when, limit),
            ).fetchall()
        return [_submission(row) for row in rows]

    def waiting(self, owner: str | None = None) -> int:
        """How many submissions are queued or being judged (`owner`'s alone, where given)."""
        query = "SELECT COUNT(*) FROM submissions WHERE state != ?"
        params: tuple[Any, ...] = (DONE,)
        if owner is not None:
            query, params = query + " AND owner = ?", (DONE, owner)
        with self._lock:
            return int(self._db.execute(query, params).fetchone()[0])

    def take(self, most: int) -> list[Submission]:
        """The oldest queued submission and the queued ones with its settings (`most` in all),
        moved to `judging`; [] when none is queued."""
        with self._transaction() as db:
            first = db.execute(
                "SELECT settings FROM submissions WHERE state = ? ORDER BY submitted LIMIT 1",
                (QUEUED,),
            ).fetchone()
            if first is None:
                return []
            rows = db.execute(
                "SELECT * FROM submissions WHERE state = ? AND settings = ? "
                "ORDER BY submitted LIMIT ?",
                (QUEUED, first["settings"], most),
            ).fetchall()
            now = time.time()
            db.executemany(
                "UPDATE submissions SET state = ?, started = ? WHERE id = ?",
                [(JUDGING, now, row["id"]) for row in rows],
            )
        return [_submission(row) for row in rows]

    def finish(self, submission_id: str, result: JsonObject) -> None:
        """Record the verdict `result` (with `status`, `detail` and `speedup` keys)."""
        with self._transaction() as db:
            db.execute(
                "UPDATE submissions SET state = ?, finished = ?, status = ?, detail = ?, "
                "speedup = ?, result = ? WHERE id = ?",
                (
                    DONE,
                    time.time(),
                    result["status"],
                    result["detail"],
                    result["speedup"],
                    json.dumps(result),
                    submission_id,
                ),
            )

    def batch(self, started: float, finished: float) -> None:
        """Note that a batch was judged from `started` to `finished` (for `metrics`)."""
        with self._transaction() as db:
            db.execute("INSERT INTO batches VALUES (?, ?)", (started, finished))

    def recover(self, recorded: Callable[[Submission], JsonObject | None]) -> tuple[int, int]:
        """After a restart: each submission left `judging` gets the verdict `recorded` finds
        for it (its record was written before the server stopped), or goes back to the queue.
        How many were finished, and how many queued again."""
        with self._lock:
            rows = self._db.execute(
                "SELECT * FROM submissions WHERE state = ?", (JUDGING,)
            ).fetchall()
        finished = 0
        for submission in map(_submission, rows):
            found = recorded(submission)
            if found is not None:
                self.finish(submission.id, found)
                finished += 1
        with self._transaction() as db:
            again = db.execute(
                "UPDATE submissions SET state = ?, started = NULL WHERE state = ?",
                (QUEUED, JUDGING),
            ).rowcount
        return finished, again

    def metrics(self, now: float) -> JsonObject:
        """The queue's length, what is being judged, what was judged in the last hour, and the
        share of that hour spent judging batches."""
        hour_ago = now - HOUR_S
        with self._lock:
            counts = dict(
                self._db.execute(
                    "SELECT state, COUNT(*) FROM submissions GROUP BY state"
                ).fetchall()
            )
            judged = self._db.execute(
                "SELECT COUNT(*) FROM submissions WHERE state = ? AND finished >= ?",
                (DONE, hour_ago),
            ).fetchone()[0]
            spans = self._db.execute(
                "SELECT started, finished FROM batches WHERE finished >= ?", (hour_ago,)
            ).fetchall()
        busy = sum(end - max(begin, hour_ago) for begin, end in spans)
        return {
            "queued": counts.get(QUEUED, 0),
            "judging": counts.get(JUDGING, 0),
            "judged_last_hour": judged,
            "judging_share_last_hour": round(busy / HOUR_S, 4),
        }


def _submission(row: sqlite3.Row) -> Submission:
    data = dict(row)
    data["settings"] = json.loads(data["settings"])
    data["result"] = json.loads(data["result"]) if data["result"] else None
    return Submission(**data)
