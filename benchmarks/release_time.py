"""How long the default release of a small table takes, with and without selection.

    python -m benchmarks --only release_time [--quick]

The 400 bundled demo rows and 600 Rotten Tomatoes review snippets (`benchmarks.reviews`,
long text), each released on the default path (`release --data --schema`: counts only, the
plan) and with half of epsilon on selection over LLM candidates (`--counts-share 0.5`: the
bundled 270M model writes the candidates' free text on the CPU), epsilon 2, in this
process, the models loaded once before the first timing (as a steward's second release
would find them). Median of `REPEATS`, interleaved. Run it on an idle machine: the LLM's
threads wait on any other job. Target: <= 60 s for a 400-600-row table, LLM candidates
included. ``--quick`` (the smoke run): one repeat, 100 review rows, no warm-up release.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.suite import Benchmark

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
REPEATS = 3
REVIEW_ROWS = 600
#: the smoke run's review rows: it checks that every cell is timed, not how long it takes
QUICK_REVIEW_ROWS = 100
SETTINGS = {"default": {}, "with selection": {"counts_share": 0.5, "selection_share": 0.5}}


def run(quick: bool = False) -> dict[str, Any]:
    import polars as pl

    from benchmarks import reviews
    from benchmarks.common import release
    from selpe_audit.artifact.signing import generate_keypair
    from selpe_audit.schema import demo_schema_path

    repeats = 1 if quick else REPEATS
    review_rows = QUICK_REVIEW_ROWS if quick else REVIEW_ROWS
    times: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        key, _, _ = generate_keypair(base / "k.pem")
        members, _ = reviews.split()
        pl.DataFrame(members[:review_rows]).write_csv(base / "reviews.csv")
        tables = {"demo, 400 rows": (ROOT / "selpe_audit/data/ed_triage_sample.csv",
                                     demo_schema_path()),
                  f"reviews, {review_rows} rows": (base / "reviews.csv", reviews.write_schema(
                      base / "reviews.schema.json"))}
        if not quick:  # the models loaded and warm before the first timing
            warm = base / "warm"
            warm.mkdir()
            data, schema = tables["demo, 400 rows"]
            release(warm, data, schema, key, {"epsilon": 2.0, **SETTINGS["with selection"]})
        for i in range(repeats):
            for t, (table, (data, schema)) in enumerate(tables.items()):
                for s, (name, settings) in enumerate(SETTINGS.items()):
                    folder = base / f"{i}-{t}-{s}"
                    folder.mkdir()
                    t0 = time.perf_counter()
                    release(folder, data, schema, key, {"epsilon": 2.0, **settings})
                    times.setdefault((table, name), []).append(time.perf_counter() - t0)
                    print(f"{table}, {name}: {times[(table, name)][-1]:.1f} s", flush=True)
    rows = [{"table": t, "release": n, "median_s": statistics.median(v), "runs": len(v)}
            for (t, n), v in times.items()]
    worst = max(r["median_s"] for r in rows)
    table = ("| table | release | median s | runs |\n|---|---|---|---|\n" + "\n".join(
        f"| {r['table']} | {r['release']} | {r['median_s']:.1f} | {r['runs']} |" for r in rows))
    return {"rows": rows, "table": table,
            "summary": f"Small-table releases at epsilon 2 on 2 CPUs: at most {worst:.0f} s "
                       "(target 60 s, LLM candidates included)."}


BENCHMARK = Benchmark("release_time", run)
