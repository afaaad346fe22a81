"""Cost of the OpenDP noisy-count release next to a plain polars group_by of the same counts.

    python -m benchmarks --only counts [--quick] [--set rows=1000000] [--set repeats=7]

Both sides compute the same workload (class balance, one class-conditional histogram per
field over its public bins, joined onto every public key) from the same derived frame.
Each side runs in its own child process so its peak memory (VmHWM) is its own; times
are medians over repeats. Rows are the demo generator's, tiled to the requested size.

The OpenDP time has two parts, reported apart: the one-time hand-off of the frame to
OpenDP's compositor (polars serializes the in-memory frame and OpenDP copies it into Rust:
linear in the rows, paid once per release) and the queries themselves (plan check, count,
noise, join on the public keys), timed on their own as the rest.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import statistics
import time
from pathlib import Path
from typing import Any

import polars as pl

from benchmarks.suite import Benchmark, Result, fmt, markdown_table
from release.config_sections import DEFAULT_EPSILON, CountsConfig
from release.counts.keys import derive_frame
from release.counts.marginals import plan_queries
from release.dp import enable as enable_opendp
from release.dp.counts import make_context, release_counts
from release.dp.unit import PrivacyUnit
from selpe_audit.demo.generator import generate_rows
from selpe_audit.schema import demo_schema_path, load_schema

CACHE = Path(__file__).parent / ".cache"


#: the counts' epsilon of a default release: epsilon 2, half of it for the counts
COUNTS_EPSILON = DEFAULT_EPSILON * 0.5


def _frame(rows: int) -> pl.LazyFrame:
    schema = load_schema(demo_schema_path())
    CACHE.mkdir(exist_ok=True)
    path = CACHE / f"derived_{rows}.parquet"
    if not path.exists():
        base = generate_rows(min(rows, 100_000), seed=7)
        frame = derive_frame(base, schema, CountsConfig(), None).collect()
        reps = -(-rows // frame.height)
        pl.concat([frame] * reps).head(rows).write_parquet(path)
    return pl.scan_parquet(path)


def _peak_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _run(side: str, rows: int, repeats: int, out: Any) -> None:
    """One side, in a spawned process of its own (its peak memory is its own): the
    process's entry, so it turns OpenDP's features on itself."""
    enable_opendp()
    queries = plan_queries(load_schema(demo_schema_path()), CountsConfig(), COUNTS_EPSILON)
    frame = _frame(rows).collect().lazy()
    times, handoff = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        if side == "opendp":
            release_counts(frame, PrivacyUnit(), queries)
        else:
            for q in queries:
                (frame.group_by(list(q.by)).len()
                 .join(q.keys.lazy(), on=list(q.by), how="right").collect())
        times.append(time.perf_counter() - t0)
        if side == "opendp":  # the compositor alone: the frame's hand-off to OpenDP
            t0 = time.perf_counter()
            make_context(frame, PrivacyUnit(), [q.epsilon for q in queries])
            handoff.append(time.perf_counter() - t0)
    out.put({"side": side, "median_s": statistics.median(times), "peak_mib": _peak_mib(),
             "queries": len(queries),
             "handoff_s": statistics.median(handoff) if handoff else 0.0})


def _result(q: Any, p: Any, side: str) -> dict[str, Any]:
    """The child's result; an error naming the side if it exits without one (instead of
    waiting for ever)."""
    while True:
        try:
            return q.get(timeout=5)
        except queue.Empty:
            if not p.is_alive():
                raise RuntimeError(f"the {side} side's process exited with code "
                                   f"{p.exitcode} before its result (see its traceback "
                                   "above)") from None


def run(quick: bool = False, rows: int | None = None,
        repeats: int | None = None) -> dict[str, Any]:
    rows = rows or (20_000 if quick else 1_000_000)
    repeats = repeats or (1 if quick else 7)
    _frame(rows)  # build the cached input once, outside the measured children
    ctx = mp.get_context("spawn")
    results = {}
    for side in ("polars", "opendp"):
        q = ctx.Queue()
        p = ctx.Process(target=_run, args=(side, rows, repeats, q))
        p.start()
        results[side] = _result(q, p, side)
        p.join()
    polars_s, opendp_s = results["polars"]["median_s"], results["opendp"]["median_s"]
    handoff_s = results["opendp"]["handoff_s"]
    return {"rows": rows, "repeats": repeats, "queries": results["opendp"]["queries"],
            "polars_s": polars_s, "opendp_s": opendp_s, "time_ratio": opendp_s / polars_s,
            "opendp_handoff_s": handoff_s, "opendp_queries_s": opendp_s - handoff_s,
            "queries_ratio": (opendp_s - handoff_s) / polars_s,
            "polars_peak_mib": results["polars"]["peak_mib"],
            "opendp_peak_mib": results["opendp"]["peak_mib"], "target_ratio": 3.0}


def _table(r: Result) -> str:
    return markdown_table(("rows", "polars (s)", "OpenDP (s)", "handoff / queries (s)", "ratio",
                           "peak MiB polars / OpenDP"),
                          [(f"{r['rows']:,}", fmt(r["polars_s"], 2), fmt(r["opendp_s"], 2),
                            f"{r['opendp_handoff_s']:.2f} / {r['opendp_queries_s']:.2f}",
                            f"{r['time_ratio']:.1f}x",
                            f"{r['polars_peak_mib']:.0f} / {r['opendp_peak_mib']:.0f}")])


def _summary(r: Result) -> str:
    return (f"OpenDP counts take {r['time_ratio']:.1f}x plain polars on {r['rows']:,} rows "
            f"(queries alone {r['queries_ratio']:.1f}x; target {r['target_ratio']:g}x).")


BENCHMARK = Benchmark("counts", run, table=_table, summary=_summary)
