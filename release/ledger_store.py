"""Where the lifetime ledger lives: an append-only log of events, in a folder or PostgreSQL.

The ledger (`release.ledger`) is a sequence of events - a dataset's caps fixed, a release
reserved, its people charged, its first mechanism started, its end, a signed raise - from
which every spend is computed; nothing is ever changed in place. Two back ends:

- **a folder** (the embedded default, for one user): the events in one JSON file and each
  release's people in a file of their own, under a file lock, every file sealed with a MAC
  keyed with the folder's secret, so a file edited by hand is refused. Its owner can still
  copy the folder aside and back: for a steward who must not be able to roll the ledger
  back, use
- **PostgreSQL** (named by the administrator's installation file, ``[ledger] url`` and
  ``ledger_id``): the steward's role writes no table; it calls the ledger's functions, which
  check each event and write it themselves, assign ids, sequence numbers and times, and
  compute each person's spend (`scripts/ledger-postgres.sql` sets up the tables, the
  functions, the triggers that refuse every change, and the roles; docs/deployment.md).

Both check every event against the rules of `release.ledger_rules` before writing it, and
every reader checks the whole log again.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from release.ledger_people import People, people_record
from release.ledger_rules import checked
from selpe_audit.artifact.canonical import atomic_write_bytes
from selpe_audit.errors import UserError

EVENTS_FORMAT = "selpe-audit/ledger-events/1"
_MAC_DOMAIN = b"selpe-audit/ledger-mac/1"
_LINK_DOMAIN = b"selpe-audit/ledger-link/1"


class LedgerStore(Protocol):
    """An append-only event log with its secrets and a lock, written only through the
    operations below, each of which checks its event against the log (`release.ledger_rules`)
    before writing it."""

    #: where the ledger is, for messages (a folder path, or "PostgreSQL ledger at host/db")
    where: str

    def ledger_id(self) -> str:
        """16 hex digits, random, made once per ledger: names it, reveals no path."""
        ...

    def key(self) -> bytes:
        """The record key: keys the hashes of the people's records (and the folder's MACs)."""
        ...

    def link(self, digests: np.ndarray) -> np.ndarray:
        """Linkage keys (uint64) of the people's linkage digests (uint64), keyed with a key
        that never leaves the store (in PostgreSQL: that the steward's role cannot read)."""
        ...

    def locked(self) -> Any:
        """A context in which no other release reads or appends (check, then append)."""
        ...

    def events(self) -> list[dict[str, Any]]:
        """Every event, in order, each checked against those before it."""
        ...

    def reserve(self, dataset: str, epsilon: float, delta: float, note: str,
                caps: tuple[float, float]) -> str:
        """A new release's reservation (``caps``: a new dataset's); its id, made here."""
        ...

    def charge(self, rid: str, people: People) -> None:
        """A reserved release's people, each with their history (this release's bit set)."""
        ...

    def measuring(self, rid: str) -> None:
        """The release's first mechanism starts: no refund from here on."""
        ...

    def end(self, rid: str, status: str, epsilon: float | None = None,
            delta: float | None = None, why: str | None = None) -> None:
        """How the release ended, and what it spent."""
        ...

    def add_raise(self, record: dict[str, Any]) -> None:
        """A signed raise of a dataset's caps (checked against the raise keys on reading)."""
        ...

    def people(self, event: dict[str, Any]) -> People:
        """The people a ``people`` event charged, with their histories."""
        ...


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# ----- the folder ---------------------------------------------------------------------------

@contextmanager
def flock(lock_path: Path, what: str, timeout_s: float = 60.0) -> Iterator[None]:
    """An exclusive lock on ``lock_path`` (created 0600), waiting up to ``timeout_s``."""
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o600)
    except OSError as e:
        raise UserError(f"{lock_path.parent}: cannot use the lifetime ledger folder "
                        f"({e.strerror})") from None
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise UserError(f"{lock_path}: another process holds the {what} lock; "
                                    "wait for it to finish") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)


class FolderStore:
    """The events in ``events.json``, each release's people in ``people/<release>.npz``
    (its SHA-256 in the event), sealed with a MAC under the folder's ``fingerprint.key``."""

    ID_FILE = "ledger-id.json"
    KEY_FILE = "fingerprint.key"
    EVENTS_FILE = "events.json"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.where = str(self.path)
        self._key: bytes | None = None
        self._depth = 0

    @contextmanager
    def locked(self) -> Iterator[None]:
        if self._depth:  # re-entrant within this process
            yield
            return
        with flock(self.path / ".ledger.lock", "lifetime ledger"):
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1

    def ledger_id(self) -> str:
        with self.locked():
            p = self.path / self.ID_FILE
            meta = _read_json(p, "ledger id file")
            if meta is None or not re.fullmatch(r"[0-9a-f]{16}", str(meta.get("ledger_id"))):
                if meta is not None:
                    raise UserError(f"{p}: ledger id file is corrupt; restore it from backup")
                meta = {"ledger_id": secrets.token_hex(8), "created": now()}
                _write_json(p, meta)
            return str(meta["ledger_id"])

    def key(self) -> bytes:
        if self._key is None:
            with self.locked():
                self._key = self._load_or_make_key()
        return self._key

    def _load_or_make_key(self) -> bytes:
        p = self.path / self.KEY_FILE
        if p.exists():
            text = p.read_text(encoding="ascii", errors="replace").strip()
            if not re.fullmatch(r"[0-9a-f]{64}", text):
                raise UserError(f"{p}: the ledger's key is corrupt; restore it from backup")
            return bytes.fromhex(text)
        if (self.path / self.EVENTS_FILE).exists():
            raise UserError(f"{p}: the ledger folder's key is missing but its events exist; "
                            "restore it from backup")
        key = secrets.token_bytes(32)
        atomic_write_bytes(p, (key.hex() + "\n").encode("ascii"), mode=0o600)
        return key

    def link(self, digests: np.ndarray) -> np.ndarray:
        key = hashlib.blake2b(_LINK_DOMAIN, digest_size=32, key=self.key()).digest()
        return np.array([int.from_bytes(hashlib.blake2b(int(d).to_bytes(8, "little"),
                                                        digest_size=8, key=key).digest(),
                                        "little") or 1 for d in digests], dtype=np.uint64)

    def events(self) -> list[dict[str, Any]]:
        p = self.path / self.EVENTS_FILE
        if any(self.path.glob("*.ledger.json")):
            raise UserError(f"{self.path}: this folder holds lifetime ledgers of the earlier "
                            "per-dataset format, which charge datasets, not people; keep it as "
                            "the record of what was spent and give this installation a new "
                            "ledger folder (docs/release.md, 'Lifetime budget')")
        doc = _read_json(p, "lifetime ledger")
        if doc is None:
            return []
        if not hmac.compare_digest(str(doc.get("mac", "")), folder_mac(self.key(), doc)) or \
                doc.get("format") != EVENTS_FORMAT or not isinstance(doc.get("events"), list):
            raise UserError(f"{p}: the lifetime ledger's MAC does not match: it was edited "
                            "outside selpe-audit; restore it from backup")
        return checked(doc["events"], str(p))

    def _append(self, event: dict[str, Any], people: People | None = None) -> None:
        """Append ``event`` (at now) if the log with it keeps every rule; else refuse."""
        with self.locked():
            events = self.events()
            if event["kind"] != "raise":  # a raise is signed as it is (it says when itself)
                event = {**event, "at": now()}
            if people is not None:
                data = people.to_bytes()
                name = f"{event['rid']}.npz"
                event = {**event, "file": name, "sha256": hashlib.sha256(data).hexdigest()}
            checked([*events, event], self.where)
            if people is not None:
                atomic_write_bytes(self.path / "people" / name, data, mode=0o600)
            doc = {"format": EVENTS_FORMAT, "events": [*events, event]}
            _write_json(self.path / self.EVENTS_FILE, {**doc, "mac": folder_mac(self.key(), doc)})

    def reserve(self, dataset: str, epsilon: float, delta: float, note: str,
                caps: tuple[float, float]) -> str:
        with self.locked():
            if not any(e["kind"] == "dataset" and e["dataset"] == dataset
                       for e in self.events()):
                self._append({"kind": "dataset", "dataset": dataset,
                              "lifetime_epsilon": caps[0], "lifetime_delta": caps[1]})
            rid = uuid.uuid4().hex[:12]
            self._append({"kind": "reserve", "rid": rid, "dataset": dataset,
                          "epsilon": epsilon, "delta": delta, "note": note})
            return rid

    def charge(self, rid: str, people: People) -> None:
        self._append({"kind": "people", "rid": rid, "people": people.count}, people)

    def measuring(self, rid: str) -> None:
        self._append({"kind": "measuring", "rid": rid})

    def end(self, rid: str, status: str, epsilon: float | None = None,
            delta: float | None = None, why: str | None = None) -> None:
        extra = {k: v for k, v in (("epsilon", epsilon), ("delta", delta), ("why", why))
                 if v is not None}
        self._append({"kind": "end", "rid": rid, "status": status, **extra})

    def add_raise(self, record: dict[str, Any]) -> None:
        self._append(record)

    def people(self, event: dict[str, Any]) -> People:
        p = self.path / "people" / str(event.get("file", ""))
        try:
            data = p.read_bytes()
        except OSError:
            data = b""
        if hashlib.sha256(data).hexdigest() != event.get("sha256"):
            raise UserError(f"{p}: the people a release charged are missing or were changed; "
                            "restore the ledger folder from backup")
        return people_record(data, p)


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    atomic_write_bytes(path, (json.dumps(doc, indent=1, sort_keys=True) + "\n")
                       .encode("utf-8"), mode=0o600)


def _read_json(path: Path, what: str) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        assert isinstance(doc, dict)
    except (json.JSONDecodeError, AssertionError, UnicodeDecodeError):
        raise UserError(f"{path}: {what} is corrupt; restore it from backup (it must never be "
                        "deleted to make room for a release)") from None
    return doc


def folder_mac(key: bytes, doc: dict[str, Any]) -> str:
    body = json.dumps({k: v for k, v in doc.items() if k != "mac"}, sort_keys=True,
                      separators=(",", ":")).encode("utf-8")
    return hmac.new(hmac.new(key, _MAC_DOMAIN, hashlib.sha256).digest(), body,
                    hashlib.sha256).hexdigest()


def open_store(location: str | Path, ledger_id: str | None = None) -> LedgerStore:
    """The store at ``location``: a postgresql:// URL (that must answer with ``ledger_id``,
    when given), or a folder."""
    from release.database import is_database_url

    if is_database_url(str(location)):
        from release.ledger_postgres import PostgresStore

        return PostgresStore(str(location), ledger_id)
    return FolderStore(location)
