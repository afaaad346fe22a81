"""Reading the private rows from PostgreSQL next to reading the same rows from a CSV file.

    python -m benchmarks --only database [--quick] [--set rows=100000] [--set repeats=3]

Both sides go through `read_private_rows` (read, coerce, validate every row), so the ratio
is the cost of the database path: ADBC's PostgreSQL driver streaming Arrow batches from a
``REPEATABLE READ, READ ONLY`` transaction over loopback, against polars' CSV reader. Rows
are the demo generator's (fictional); the server is the tests' throwaway cluster
(tests/postgres.py, Debian's ``postgresql``). Medians over interleaved repeats.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import polars as pl

from benchmarks.suite import Benchmark, Result
from release.database import DatabaseSource
from release.private_data import read_private_rows
from selpe_audit.demo.generator import generate_rows
from selpe_audit.schema import demo_schema_path, load_schema


def run(quick: bool = False, rows: int = 100_000, repeats: int = 3) -> dict[str, Any]:
    from tests.postgres import READER_PW, load_rows, postgres_bin, server

    if postgres_bin() is None:
        return {"skipped": "PostgreSQL server binaries not installed (Debian 'postgresql')"}
    if quick:
        rows, repeats = 2_000, 1
    schema = load_schema(demo_schema_path())
    data = generate_rows(rows, seed=0)
    times: dict[str, list[float]] = {"csv": [], "postgresql": []}
    with tempfile.TemporaryDirectory() as tmp, server() as srv:
        csv = Path(tmp) / "rows.csv"
        pl.DataFrame(data).write_csv(csv)
        load_rows(srv, "triage", data)
        src = DatabaseSource(srv.url(), table="triage")
        os.environ["PGPASSWORD"] = READER_PW
        try:
            for _ in range(repeats):
                for name, where in (("csv", csv), ("postgresql", src)):
                    t0 = time.perf_counter()
                    got = read_private_rows(where, schema).priv_rows
                    times[name].append(time.perf_counter() - t0)
                    assert len(got) == rows
        finally:
            os.environ.pop("PGPASSWORD", None)
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["postgresql"] / med["csv"]
    table = ("| source | read + validate (s) | rows/s | ratio to CSV |\n|---|---|---|---|\n"
             + "\n".join(f"| {k} | {v:.2f} | {rows / v:,.0f} | {v / med['csv']:.2f} |"
                         for k, v in med.items()))
    print(table)
    return {"rows": rows, "repeats": repeats, "seconds": med, "ratio": ratio, "table": table}


def _summary(r: Result) -> str:
    return (f"Reading {r['rows']:,} rows from PostgreSQL takes {r['ratio']:.2f}x the CSV "
            "read (validation included).")


BENCHMARK = Benchmark("database", run, summary=_summary)
