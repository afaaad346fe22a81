"""Private rows read straight from PostgreSQL, once, in one consistent snapshot.

The reader is ADBC's PostgreSQL driver (``adbc-driver-postgresql``: libpq inside, Arrow
record batches out, no server-side cursor code of ours). The query runs in one
``REPEATABLE READ, READ ONLY`` transaction, so rows inserted while a release reads are
either all in its snapshot or none, and the account cannot change anything even if it could.

Nothing about the source's location leaves the enclave: the artifact gets the source kind and
an HMAC-SHA256 of the query text under a key that stays in the enclave
(`DatabaseSource.public_description`; a plain hash of a short query is undone by guessing
queries), never the host, user, database or query. The password never appears on a command
line or in a config: libpq takes it from ``PGPASSWORD`` or a password file (``PGPASSFILE``,
default ``~/.pgpass``); a connection string that carries one (``user:pw@`` or
``?password=``) is refused. Errors are one line that names what to fix and never quote the
server's message: PostgreSQL's messages can contain row values (``invalid input syntax for
type integer: "..."``).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import polars as pl

from selpe_audit.artifact.records import Source
from selpe_audit.errors import UserError

SCHEMES = ("postgresql", "postgres")
_QUERY_DOMAIN = b"selpe-audit/source-query/1\0"
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")
# SQLSTATE classes and codes (PostgreSQL appendix A) -> what the user should fix.
_SQLSTATE = {
    "28": "authentication failed: check the user and the password in PGPASSWORD or PGPASSFILE",
    "08": "cannot connect: check host, port and that the server runs",
    "3D": "the database does not exist: check the database name in the connection string",
    "42501": "permission denied: grant the release account SELECT on the table",
    "42P01": "the query names a table that does not exist",
    "42703": "the query names a column that does not exist",
    "42601": "the query has a syntax error",
    "42": "the query is not valid SQL for this database",
    "22": "the query failed on a value it could not convert (cast it in the query)",
    "25006": "the query tried to write; the release reads in a read-only transaction",
    "57014": "the query was cancelled (statement timeout)",
}


def _query_password(query: str) -> bool:
    """libpq also takes ``?password=...`` from a URI's parameters: as refused as ``user:pw@``."""
    return any(k.strip().lower() == "password"
               for k, _ in parse_qsl(query, keep_blank_values=True))


def is_database_url(data: str) -> bool:
    """True for ``postgresql://...`` (and ``postgres://``): the release reads a database."""
    return urlsplit(str(data)).scheme in SCHEMES


def check_url(url: str, what: str) -> str:
    """``url`` if it is a postgresql:// connection string without a password; else a
    one-line `UserError` naming ``what`` and what to fix."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise UserError(f"{what}: '{parts.scheme}' is not a supported database; use "
                        "postgresql://user@host[:port]/database")
    if parts.password is not None or _query_password(parts.query):
        raise UserError(f"{what}: the connection string carries a password; remove it and "
                        "put the password in PGPASSWORD or a password file (PGPASSFILE, "
                        "default ~/.pgpass)")
    return url


def explain(e: Exception) -> str:
    """What a database error means for the user, from its SQLSTATE, never its text."""
    return _explain(e)


@dataclass(frozen=True)
class DatabaseSource:
    """Where the private rows are: a connection string and one query (or a table)."""

    url: str
    query: str | None = None
    table: str | None = None

    def __post_init__(self) -> None:
        check_url(self.url, "--data")
        if (self.query is None) == (self.table is None):
            raise UserError("a database source needs exactly one of --query \"SELECT ...\" "
                            "or --table schema.name")
        if self.query is not None and not self.query.strip():
            raise UserError("--query is empty")
        if self.table is not None and not all(_IDENT.fullmatch(p)
                                              for p in self.table.split(".")):
            raise UserError(f"--table '{self.table}': give a plain name or schema.name "
                            "(letters, digits, _ and $)")

    @property
    def sql(self) -> str:
        if self.query is not None:
            return self.query.strip().rstrip(";")
        return "SELECT * FROM " + ".".join(f'"{p}"' for p in self.table.split("."))  # type: ignore[union-attr]

    @property
    def display(self) -> str:
        """The connection string for the enclave console (it never holds a password)."""
        parts = urlsplit(self.url)
        return urlunsplit(parts._replace(query=""))

    def public_description(self, key: bytes) -> Source:
        """What the artifact may say about the source: its kind and the query's HMAC under
        ``key`` (an enclave secret), which the enclave can recompute and nobody can invert."""
        if len(key) < 16:
            raise ValueError("the query's HMAC needs an enclave secret of at least 16 bytes")
        mac = hmac.new(key, _QUERY_DOMAIN + self.sql.encode("utf-8"), hashlib.sha256)
        return Source("postgresql", query_hmac_sha256=mac.hexdigest())


def _explain(e: Exception) -> str:
    code = str(getattr(e, "sqlstate", None) or "")
    text = str(e)
    if not code:  # libpq's connection errors carry no SQLSTATE: read the kind, not the text
        if "authentication failed" in text or "no password supplied" in text:
            code = "28"
        elif "does not exist" in text and "database" in text:
            code = "3D"
        elif "connect" in text.lower():
            code = "08"
    for key in (code, code[:2]):
        if key and key in _SQLSTATE:
            return _SQLSTATE[key] + (f" (SQLSTATE {code})" if len(code) == 5 else "")
    return f"the database reported an error ({type(e).__name__}" + \
        (f", SQLSTATE {code})" if code else ")")


def read_frame(src: DatabaseSource) -> pl.DataFrame:
    """Run the query in one read-only, repeatable-read transaction; the rows as a frame."""
    try:
        import adbc_driver_postgresql.dbapi as dbapi
    except ImportError:
        raise UserError("reading from PostgreSQL needs the package 'adbc-driver-postgresql' "
                        "(pip install adbc-driver-postgresql)") from None
    try:
        conn = dbapi.connect(src.url, autocommit=False)
    except Exception as e:
        raise UserError(f"{src.display}: {_explain(e)}") from None
    try:
        with conn.cursor() as cur:
            try:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                cur.execute(src.sql)
                table = cur.fetch_arrow_table()
            except Exception as e:
                raise UserError(f"{src.display}: {_explain(e)}") from None
        conn.rollback()  # read only: nothing to commit, and the snapshot ends here
    finally:
        conn.close()
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame
