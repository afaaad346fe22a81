"""The lifetime ledger in PostgreSQL, as the administrator set it up
(`scripts/ledger-postgres.sql`): the steward's role calls the ledger's functions, which check
each event and write it themselves; it may write no table. The connection is pinned to the
installation's host, port, database and ledger id.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from release.ledger_people import People, people_record
from release.ledger_rules import checked
from selpe_audit.errors import UserError

#: one advisory lock for every release's check-then-charge (the functions take it too)
_LOCK_ID = 0x5E1BE_1ED6E5
#: libpq reads these from the environment: none may move or reshape the ledger's connection
#: (only a password may come from outside the URL: PGPASSWORD, or the PGPASSFILE file)
_PG_VARIABLES_KEPT = ("PGPASSWORD", "PGPASSFILE")


def pinned_url(url: str, what: str) -> str:
    """``url`` if it names the host, the port and the database itself (so no libpq variable
    or service file supplies them) and no libpq option that could: one line otherwise."""
    from urllib.parse import parse_qsl, urlsplit

    from release.database import check_url

    check_url(url, what)
    u = urlsplit(url)
    try:
        port = u.port
    except ValueError:
        port = None
    if not (u.hostname and port and u.path.strip("/")):
        raise UserError(f"{what}: a PostgreSQL ledger's URL names its host, port and database "
                        "(postgresql://role@host:5432/database), so no PGHOST, PGPORT or "
                        "service file can move it")
    bad = sorted({k for k, _ in parse_qsl(u.query)} & {"host", "hostaddr", "port", "dbname",
                                                       "service", "options"})
    if bad:
        raise UserError(f"{what}: remove {', '.join(bad)} from the ledger URL's parameters")
    return url


@contextmanager
def _libpq_environment_cleared() -> Iterator[None]:
    """No PG* variable but a password's while libpq connects (PGHOSTADDR, PGSERVICE,
    PGOPTIONS... would redirect or reshape the ledger's connection)."""
    saved = {k: v for k, v in os.environ.items()
             if k.startswith("PG") and k not in _PG_VARIABLES_KEPT}
    for k in saved:
        del os.environ[k]
    try:
        yield
    finally:
        os.environ.update(saved)


class PostgresStore:
    """The ledger the administrator set up with `scripts/ledger-postgres.sql`: the steward's
    role calls its functions, which check and write every event (the role may not write a
    table); the record key and the ledger id come from ``ledger_info()``, and the linkage key
    never leaves the database. The connection is pinned: the URL names host, port and
    database, no libpq variable but the password's is read, and the database must answer
    with ``ledger_id`` (the installation's), or nothing is charged."""

    def __init__(self, url: str, ledger_id: str | None = None) -> None:
        self.url = pinned_url(url, "the ledger's [ledger] url")
        self.expected_id = ledger_id
        self.where = f"the PostgreSQL ledger at {_host_db(url)}"
        self._conn: Any = None
        self._meta: tuple[str, bytes] | None = None

    def _connection(self) -> Any:
        if self._conn is None:
            import adbc_driver_postgresql.dbapi as dbapi

            from release.database import explain

            try:
                with _libpq_environment_cleared():
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
            if _sqlstate(e) == "SQLSTATE 22023":  # a rule of the ledger's own functions
                raise UserError(f"{self.where}: the ledger refused the event: "
                                f"{_refusal(e)}; nothing was charged") from None
            raise UserError(f"{self.where}: the ledger refused the statement "
                            f"({_sqlstate(e)}): ask the administrator to check the ledger's "
                            "functions and this role's grants (docs/deployment.md)") from None

    def _load_meta(self) -> tuple[str, bytes]:
        if self._meta is None:
            rows = self._query("SELECT ledger_id, key FROM ledger_info()")
            if len(rows) != 1 or not re.fullmatch(r"[0-9a-f]{16}", str(rows[0][0])) or \
                    len(bytes(rows[0][1])) != 32:
                raise UserError(f"{self.where}: ledger_info() must answer one ledger id and "
                                "a 32-byte key; run the administrator's setup "
                                "(scripts/ledger-postgres.sql)")
            if self.expected_id is not None and rows[0][0] != self.expected_id:
                raise UserError(f"{self.where}: this database holds ledger {rows[0][0]}, not "
                                f"the installation's {self.expected_id}: it is another "
                                "ledger; nothing was charged")
            self._meta = (str(rows[0][0]), bytes(rows[0][1]))
        return self._meta

    def ledger_id(self) -> str:
        return self._load_meta()[0]

    def key(self) -> bytes:
        return self._load_meta()[1]

    def link(self, digests: np.ndarray) -> np.ndarray:
        self._load_meta()
        data = np.ascontiguousarray(digests, dtype="<u8").tobytes()
        out = bytes(self._query("SELECT ledger_link($1::bytea)", (data,))[0][0] or b"")
        keys = np.frombuffer(out, dtype="<u8").astype(np.uint64)
        keys[keys == 0] = 1  # 0 means "no linkage values"
        return keys

    @contextmanager
    def locked(self) -> Iterator[None]:
        """A session advisory lock: other releases wait for it (their check-then-append)."""
        self._load_meta()
        self._query("SELECT pg_advisory_lock($1)", (_LOCK_ID,))
        try:
            yield
        finally:
            self._query("SELECT pg_advisory_unlock($1)", (_LOCK_ID,))

    def events(self) -> list[dict[str, Any]]:
        self._load_meta()
        events = [json.loads(r[1]) for r in self._query("SELECT seq, event FROM ledger_read()")]
        return checked(events, self.where)

    def reserve(self, dataset: str, epsilon: float, delta: float, note: str,
                caps: tuple[float, float]) -> str:
        self._load_meta()
        return str(self._query("SELECT ledger_reserve($1::text, $2::float8, $3::float8, $4::text, "
                               "$5::float8, $6::float8)",
                               (dataset, float(epsilon), float(delta), note, float(caps[0]),
                                float(caps[1])))[0][0])

    def charge(self, rid: str, people: People) -> None:
        self._load_meta()
        history = np.ascontiguousarray(people.history, dtype="<u8")
        self._query("SELECT ledger_charge($1::text, $2::bytea, $3::integer, $4::bytea, "
                    "$5::integer)",
                    (rid, people.to_bytes(), people.count, history.tobytes(),
                     int(history.shape[1])))

    def measuring(self, rid: str) -> None:
        self._load_meta()
        self._query("SELECT ledger_measuring($1::text)", (rid,))

    def end(self, rid: str, status: str, epsilon: float | None = None,
            delta: float | None = None, why: str | None = None) -> None:
        self._load_meta()
        self._query("SELECT ledger_end($1::text, $2::text, $3::float8, $4::float8, $5::text)",
                    (rid, status, epsilon, delta, why))

    def add_raise(self, record: dict[str, Any]) -> None:
        self._load_meta()
        self._query("SELECT ledger_raise($1::text)", (json.dumps(record, sort_keys=True),))

    def people(self, event: dict[str, Any]) -> People:
        """The people as charged, each with the history the database checked (the copy in
        the people file is not read)."""
        from dataclasses import replace

        rows = self._query("SELECT people, history, words FROM ledger_read_people($1::text)",
                           (event["rid"],))
        data = bytes(rows[0][0]) if len(rows) == 1 and rows[0][0] is not None else b""
        if hashlib.sha256(data).hexdigest() != event.get("sha256"):
            raise UserError(f"{self.where}: the people release {event['rid']} charged are "
                            "missing or twice; ask the administrator")
        where = f"{self.where}: release {event['rid']}"
        people, words = people_record(data, where), int(rows[0][2])
        history = np.frombuffer(bytes(rows[0][1]), dtype="<u8").astype(np.uint64)
        if history.size != people.count * words:
            raise UserError(f"{where}: its people and their histories disagree; the ledger "
                            "refuses to answer: ask the administrator")
        return replace(people, history=history.reshape(people.count, words))


def _refusal(e: Exception) -> str:
    """The reason a ledger function gave (its own words, never a value of the steward's)."""
    text = str(e).splitlines()[0] if str(e) else ""
    m = re.search(r"selpe-audit ledger: ([^\n]*)", text)
    return m.group(1).strip().rstrip(".") if m else "a rule of the ledger"


def _host_db(url: str) -> str:
    from urllib.parse import urlsplit

    u = urlsplit(url)
    return f"{u.hostname or 'localhost'}{u.path or ''}"


def _sqlstate(e: Exception) -> str:
    state = getattr(e, "sqlstate", None)
    return f"SQLSTATE {state}" if state else type(e).__name__
