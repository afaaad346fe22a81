"""User-facing errors.

A `UserError` is something the user can fix (a bad file, flag or config). The CLI prints
its message as one line and exits non-zero, never with a traceback. Messages name the
file, row and field - and never quote a private value, because enclave console output
may be copied off-site.
"""

from __future__ import annotations


class UserError(Exception):
    """An error the user can fix; its message is one line that says what to fix."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        one_line = " ".join(str(message).split())
        super().__init__(one_line)
