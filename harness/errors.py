"""Errors that reach the user as one line."""


class UserError(Exception):
    """Bad input from the user: an unknown problem, a malformed file, a bad flag.

    The message is one line that says what is wrong and how to fix it; run.py prints it
    without a traceback and exits with EXIT_INPUT.
    """


class ProblemRefused(UserError):
    """A problem the run cannot judge, for a fault of its own: its file does not load, its
    reference fails, or --strict-audit refuses it. A sweep records each of its solutions as
    `problem_error`, not judged, so that its summary counts them."""


class HarnessError(Exception):
    """The harness itself failed (a folder it cannot write, a bug of its own), not the solution
    it was running: the run stops with this one line, keeping what was recorded before it, and
    records no verdict against the solution."""


class Verdict(Exception):
    """Ends a worker's job early with a status, a one-line detail and, for a broken rule of
    fair measurement (status "rejected"), the rule's short name (`reason`)."""

    def __init__(self, verdict: str, detail: str, reason: str | None = None) -> None:
        super().__init__(detail)
        self.status = verdict
        self.detail = detail
        self.reason = reason
