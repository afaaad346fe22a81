"""Crash-safe progress: every candidate is appended to ``<out>.partial.jsonl`` as it is made.

Line 1 is a header binding the file to one decode (artifact SHA-256 and every setting that
changes which candidates are made); each further line is one candidate with a hidden
sequence number ``seq`` (0, 1, 2, ... in file order) and its index ``i`` in its class's
stream. Lines are flushed as written and fsynced every `SYNC_EVERY` records or
`SYNC_SECONDS`, so a killed process loses nothing the OS has accepted, and a power cut
loses at most the last batch (a torn last line is cut off on resume). A decoder whose records
cost microseconds (``durable=False``: marginals, model) leaves the lines to the file's buffer
and syncs once at the end: a crash loses at most a buffer of candidates, remade on resume.

On resume the header must match (else refuse: the file belongs to another decode), the
sequence numbers must run 0..L-1 and each class's indices 0..m-1 (else refuse: the file was
damaged) - so a resumed decode can neither duplicate nor drop a candidate. An exclusive lock
keeps two runs from appending to the same file. Candidates are synthetic (public).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from pathlib import Path
from typing import IO, Any

from selpe_audit.errors import UserError

FORMAT = "selpe-audit/decode-checkpoint"
VERSION = 1
SYNC_EVERY = 32
SYNC_SECONDS = 1.0


def checkpoint_path(out: Path) -> Path:
    return out.with_name(out.name + ".partial.jsonl")


class Checkpoint:
    """The open checkpoint of one decode: what is done per class, and appending more."""

    def __init__(self, path: Path, binding: dict[str, Any], classes: list[Any],
                 durable: bool = True) -> None:
        self.path, self.durable = path, durable
        self.candidates: dict[Any, list[dict[str, Any]]] = {c: [] for c in classes}
        self._keys = {json.dumps(c): c for c in classes}
        self._fh: IO[bytes] = self._open_locked(path)
        self._seq = self._resumed = 0
        self._unsynced, self._synced_at = 0, time.monotonic()
        header = {"format": FORMAT, "version": VERSION, "binding": binding}
        if self._fh.seek(0, os.SEEK_END) == 0:
            self._write(header)
            self.sync()
        else:
            self._load(header)

    @staticmethod
    def _open_locked(path: Path) -> IO[bytes]:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fh = path.open("a+b")
        except OSError as e:
            raise UserError(f"{path}: cannot write the checkpoint ({e.strerror})") from None
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            raise UserError(f"{path}: another decode is writing this output; wait for it "
                            "or choose another --out") from None
        return fh

    @property
    def resumed(self) -> int:
        """Candidates found from an earlier run."""
        return self._resumed

    def done(self, class_value: Any) -> int:
        return len(self.candidates[class_value])

    def _load(self, header: dict[str, Any]) -> None:
        self._fh.seek(0)
        data = self._fh.read()
        end = data.rfind(b"\n") + 1
        if end < len(data):  # a torn last line (power cut): it was never acknowledged
            self._fh.truncate(end)
        lines = data[:end].splitlines()
        if not lines or _parse(lines[0]) != header:
            raise UserError(f"{self.path}: this checkpoint belongs to another decode (different "
                            "artifact or settings); rerun with the same settings or delete it")
        for n, line in enumerate(lines[1:], start=2):
            item = _parse(line)
            key = json.dumps(item.get("class")) if isinstance(item, dict) else None
            if (key not in self._keys or item.get("seq") != self._seq
                    or item.get("i") != len(self.candidates[self._keys[key]])
                    or not isinstance(item.get("record"), dict)):
                raise UserError(f"{self.path}: damaged at line {n} (sequence broken); delete "
                                "it to start over")
            self.candidates[self._keys[key]].append(item["record"])
            self._seq += 1
        self._resumed = self._seq
        self._fh.seek(0, os.SEEK_END)

    def append(self, class_value: Any, record: dict[str, Any]) -> None:
        """Add the class's next candidate (flushed now, fsynced in small batches)."""
        self._write({"seq": self._seq, "class": class_value,
                     "i": len(self.candidates[class_value]), "record": record})
        self.candidates[class_value].append(record)
        self._seq += 1
        self._unsynced += 1
        if self.durable and (self._unsynced >= SYNC_EVERY
                             or time.monotonic() - self._synced_at >= SYNC_SECONDS):
            self.sync()

    def _write(self, obj: dict[str, Any]) -> None:
        line = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        self._fh.write(line.encode("utf-8") + b"\n")
        if self.durable:
            self._fh.flush()

    def sync(self) -> None:
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._unsynced, self._synced_at = 0, time.monotonic()

    def close(self) -> None:
        """Sync and unlock; the file stays for a later resume."""
        if not self._fh.closed:
            with contextlib.suppress(OSError):
                self.sync()
            self._fh.close()

    def remove(self) -> None:
        """The decode is finished and written: the checkpoint is no longer needed."""
        self.close()
        self.path.unlink(missing_ok=True)


def _parse(line: bytes) -> Any:
    try:
        return json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
