"""Where the lifetime ledger lives: an append-only log of events, in a folder or PostgreSQL.

The ledger (`release.ledger`) is a sequence of events - a dataset's caps fixed, a release
reserved, its people charged, its first mechanism started, its end, a signed raise - from
which every spend is computed; nothing is ever changed in place. Two back ends:

- **a folder** (the embedded default, for one user): the events in one JSON file and each
  release's people in a file of their own, under a file lock, every file sealed with a MAC
  keyed with the folder's secret, so a file edited by hand is refused. Its owner can still
  copy the folder aside and back: for a steward who must not be able to roll the ledger
  back, use
- **PostgreSQL** (named by the administrator's installation file, ``[ledger] url``): the
  events are rows the steward's role may insert and read but never update, delete or
  truncate (`scripts/ledger-postgres.sql` sets up the tables, the triggers that refuse
  every change, and the roles; docs/deployment.md).
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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from selpe_audit.artifact.canonical import atomic_write_bytes
from selpe_audit.errors import UserError

EVENTS_FORMAT = "selpe-audit/ledger-events/1"
_MAC_DOMAIN = b"selpe-audit/ledger-mac/1"


class LedgerStore(Protocol):
    """An append-only event log with a secret key and a lock."""

    #: where the ledger is, for messages (a folder path, or "PostgreSQL ledger at host/db")
    where: str

    def ledger_id(self) -> str:
        """16 hex digits, random, made once per ledger: names it, reveals no path."""
        ...

    def key(self) -> bytes:
        """The ledger's secret: keys the people's hashes (and the folder's MACs)."""
        ...

    def locked(self) -> Any:
        """A context in which no other release reads or appends (check, then append)."""
        ...

    def events(self) -> list[dict[str, Any]]:
        """Every event, in order."""
        ...

    def append(self, event: dict[str, Any], people: bytes | None = None) -> None:
        """Append one event (and a release's people, bytes of `People.to_bytes`)."""
        ...

    def people(self, event: dict[str, Any]) -> bytes:
        """The people a ``people`` event recorded."""
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
        if not hmac.compare_digest(str(doc.get("mac", "")), _mac(self.key(), doc)) or \
                doc.get("format") != EVENTS_FORMAT or not isinstance(doc.get("events"), list):
            raise UserError(f"{p}: the lifetime ledger's MAC does not match: it was edited "
                            "outside selpe-audit; restore it from backup")
        return doc["events"]

    def append(self, event: dict[str, Any], people: bytes | None = None) -> None:
        with self.locked():
            events = self.events()
            if people is not None:
                name = f"{event['rid']}.npz"
                atomic_write_bytes(self.path / "people" / name, people, mode=0o600)
                event = {**event, "file": name, "sha256": hashlib.sha256(people).hexdigest()}
            doc = {"format": EVENTS_FORMAT, "events": [*events, event]}
            _write_json(self.path / self.EVENTS_FILE, {**doc, "mac": _mac(self.key(), doc)})

    def people(self, event: dict[str, Any]) -> bytes:
        p = self.path / "people" / str(event.get("file", ""))
        try:
            data = p.read_bytes()
        except OSError:
            data = b""
        if hashlib.sha256(data).hexdigest() != event.get("sha256"):
            raise UserError(f"{p}: the people a release charged are missing or were changed; "
                            "restore the ledger folder from backup")
        return data


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


def _mac(key: bytes, doc: dict[str, Any]) -> str:
    body = json.dumps({k: v for k, v in doc.items() if k != "mac"}, sort_keys=True,
                      separators=(",", ":")).encode("utf-8")
    return hmac.new(hmac.new(key, _MAC_DOMAIN, hashlib.sha256).digest(), body,
                    hashlib.sha256).hexdigest()


# ----- PostgreSQL ----------------------------------------------------------------------------

#: one advisory lock for every release's check-then-append (any 64-bit constant of ours)
_LOCK_ID = 0x5E1BE_1ED6E5


class PostgresStore:
    """The events as rows of ``ledger_events`` (people in ``ledger_people``), which the
    steward's role may insert and read only; ``ledger_meta`` holds the ledger id and key, set
    up by the administrator (`scripts/ledger-postgres.sql`). The password comes from
    ``PGPASSWORD`` or a password file, never the URL."""

    def __init__(self, url: str) -> None:
        from release.database import check_url

        self.url = check_url(url, "the ledger's [ledger] url")
        self.where = f"the PostgreSQL ledger at {_host_db(url)}"
        self._conn: Any = None
        self._meta: tuple[str, bytes] | None = None

    def _connection(self) -> Any:
        if self._conn is None:
            import adbc_driver_postgresql.dbapi as dbapi

            from release.database import explain

            try:
                self._conn = dbapi.connect(self.url, autocommit=True)
            except Exception as e:  # never quote the server: one line that says what to fix
                raise UserError(f"{self.where}: {explain(e)}; check the installation's "
                                "[ledger] url and PGPASSWORD or PGPASSFILE") from None
        return self._conn

    def _query(self, sql: str, params: tuple = ()) -> list[tuple]:
        try:
            with self._connection().cursor() as cur:
                cur.execute(sql, params)
                return list(cur.fetchall()) if cur.description else []
        except UserError:
            raise
        except Exception as e:
            raise UserError(f"{self.where}: the ledger refused the statement "
                            f"({_sqlstate(e)}): ask the administrator to check the ledger's "
                            "tables and this role's grants (docs/deployment.md)") from None

    def _load_meta(self) -> tuple[str, bytes]:
        if self._meta is None:
            rows = self._query("SELECT ledger_id, key FROM ledger_meta")
            if len(rows) != 1 or not re.fullmatch(r"[0-9a-f]{16}", str(rows[0][0])) or \
                    len(bytes(rows[0][1])) != 32:
                raise UserError(f"{self.where}: ledger_meta must hold one row (a 16-hex-digit "
                                "ledger id and a 32-byte key); run the administrator's setup "
                                "(scripts/ledger-postgres.sql)")
            self._meta = (str(rows[0][0]), bytes(rows[0][1]))
        return self._meta

    def ledger_id(self) -> str:
        return self._load_meta()[0]

    def key(self) -> bytes:
        return self._load_meta()[1]

    @contextmanager
    def locked(self) -> Iterator[None]:
        """A session advisory lock: other releases wait for it (their check-then-append)."""
        self._query("SELECT pg_advisory_lock($1)", (_LOCK_ID,))
        try:
            yield
        finally:
            self._query("SELECT pg_advisory_unlock($1)", (_LOCK_ID,))

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(r[0]) for r in
                self._query("SELECT event::text FROM ledger_events ORDER BY seq")]

    def append(self, event: dict[str, Any], people: bytes | None = None) -> None:
        if people is not None:
            self._query("INSERT INTO ledger_people (rid, people) VALUES ($1, $2)",
                        (event["rid"], people))
            event = {**event, "sha256": hashlib.sha256(people).hexdigest()}
        self._query("INSERT INTO ledger_events (event) VALUES ($1::jsonb)",
                    (json.dumps(event, sort_keys=True),))

    def people(self, event: dict[str, Any]) -> bytes:
        rows = self._query("SELECT people FROM ledger_people WHERE rid = $1", (event["rid"],))
        data = bytes(rows[0][0]) if len(rows) == 1 else b""
        if hashlib.sha256(data).hexdigest() != event.get("sha256"):
            raise UserError(f"{self.where}: the people release {event['rid']} charged are "
                            "missing or twice; ask the administrator")
        return data


def _host_db(url: str) -> str:
    from urllib.parse import urlsplit

    u = urlsplit(url)
    return f"{u.hostname or 'localhost'}{u.path or ''}"


def _sqlstate(e: Exception) -> str:
    state = getattr(e, "sqlstate", None)
    return f"SQLSTATE {state}" if state else type(e).__name__


def open_store(location: str | Path) -> LedgerStore:
    """The store at ``location``: a postgresql:// URL, or a folder."""
    from release.database import is_database_url

    if is_database_url(str(location)):
        return PostgresStore(str(location))
    return FolderStore(location)
