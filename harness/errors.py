"""Errors that reach the user as one line."""


class UserError(Exception):
    """Bad input from the user: an unknown problem, a malformed file, a bad flag.

    The message is one line that says what is wrong and how to fix it; run.py prints it
    without a traceback and exits with EXIT_INPUT_ERROR.
    """
