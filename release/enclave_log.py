"""The enclave-only log: what the steward may need and nobody else may read.

The invalid-row report (file, row numbers, fields, reasons: never values), ignored columns
and timings describe the private data (how many rows broke the schema, how long it took
to read), so they go to this file, next to - never inside - the artifact folder, with
mode 0600. The console keeps only the shareable progress lines.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from selpe_audit.errors import UserError

LOG_NAME = "enclave.log"


def default_log_path(out: Path) -> Path:
    """``<out>/../enclave.log``: beside the artifact folder, not in it."""
    return Path(out).absolute().parent / LOG_NAME


def check_log_path(log: Path, out: Path) -> None:
    """A log inside the artifact folder would be shipped with it: refuse."""
    log_real, out_real = Path(os.path.realpath(log)), Path(os.path.realpath(out))
    if log_real == out_real or out_real in log_real.parents:
        raise UserError("config: enclave_log must not be inside the artifact folder (out); "
                        "the log describes the private data")


class EnclaveLog:
    """Append-only, timestamped lines, one file per installation or artifact parent."""

    def __init__(self, path: Path, tag: str = "") -> None:
        self.path = Path(path)
        self.tag = tag

    def write(self, message: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError as e:
            raise UserError(f"{self.path}: cannot write the enclave log ({e.strerror})") from None
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.write(f"{stamp} {self.tag + ' ' if self.tag else ''}{message}\n")
