"""A throwaway PostgreSQL server for the database-source tests (Debian's `postgresql`).

The cluster lives in a temp folder, listens on 127.0.0.1 on a free port, uses SCRAM password
authentication (so a wrong password really fails), and is stopped at the end. Two roles:
``admin`` (superuser, loads the data) and ``reader`` (LOGIN, SELECT only: what a hospital
would give the release). initdb refuses to run as root, so as root the server runs as the
``postgres`` system user.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ADMIN_PW = "admin-pw-for-tests"
READER_PW = "reader-pw-for-tests"


def postgres_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


@dataclass(frozen=True)
class Server:
    port: int
    folder: Path

    def url(self, user: str = "reader") -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/postgres"

    def connect(self, user: str = "admin", password: str = ADMIN_PW):
        import adbc_driver_postgresql.dbapi as dbapi

        os.environ["PGPASSWORD"] = password
        try:
            return dbapi.connect(self.url(user), autocommit=True)
        finally:
            os.environ.pop("PGPASSWORD", None)

    def execute(self, *statements: str) -> None:
        with self.connect() as conn, conn.cursor() as cur:
            for sql in statements:
                cur.execute(sql)


def free_port() -> int:
    """A local TCP port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(cmd: list[str]) -> None:
    if os.getuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"{Path(cmd[-1]).name}: {r.stderr.strip()[-500:]}")


@contextmanager
def server() -> Iterator[Server]:
    bindir = postgres_bin()
    assert bindir is not None
    folder = Path(tempfile.mkdtemp(prefix="selpe-pg-"))
    os.chmod(folder, 0o777)  # the postgres user writes here when we are root
    pwfile = folder / "pw"
    pwfile.write_text(ADMIN_PW + "\n")
    os.chmod(pwfile, 0o644)
    data, port = folder / "data", free_port()
    try:
        _run([str(bindir / "initdb"), "-D", str(data), "-U", "admin", "-E", "UTF8",
              "--auth=scram-sha-256", f"--pwfile={pwfile}", "--no-sync"])
        _run([str(bindir / "pg_ctl"), "-D", str(data), "-l", str(folder / "log"), "-w", "-o",
              f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off", "start"])
        srv = Server(port, folder)
        srv.execute(f"CREATE ROLE reader LOGIN PASSWORD '{READER_PW}'")
        yield srv
    finally:
        if (data / "postmaster.pid").exists():
            _run([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"])
        shutil.rmtree(folder, ignore_errors=True)


def load_rows(srv: Server, table: str, rows: list[dict]) -> None:
    """Create ``table`` from rows (column types from Arrow) and let ``reader`` read it."""
    import polars as pl

    frame = pl.DataFrame(rows)
    with srv.connect() as conn, conn.cursor() as cur:
        cur.adbc_ingest(table, frame.to_arrow(), mode="replace")
    srv.execute(f"GRANT SELECT ON {table} TO reader")
