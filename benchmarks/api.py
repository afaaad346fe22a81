"""The Python API's overhead over the commands, measured side by side in one process.

    python -m benchmarks --only api [--quick] [--set repeats=5]

Release: the demo sample's default release (epsilon 2, a fresh ledger each time) by
``selpe-audit release`` (in this process, its printing included), by `selpe_audit.release`
with the file's path, and by `selpe_audit.release` with the sample as a polars DataFrame.
Decode: N = 10,000 rows of the model decoder (``--quick``: 1,000) by ``selpe-audit decode``
into a Parquet file and by `Artifact.sample` into a DataFrame (its temporary file read back
included). The runs alternate, repeat after repeat; medians and their ratios (issue 68:
API over command <= 1.05).
"""

from __future__ import annotations

import contextlib
import io
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

import selpe_audit
from benchmarks.suite import Benchmark
from selpe_audit.cli.main import main as cli
from selpe_audit.schema import demo_schema_path

SAMPLE = Path(__file__).resolve().parents[1] / "selpe_audit" / "data" / "ed_triage_sample.csv"
EPSILON = 2.0


def _quiet(call: Callable[[], Any]) -> float:
    """Seconds ``call`` took, its printing swallowed (it still happens)."""
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        t0 = time.perf_counter()
        call()
        return time.perf_counter() - t0


def _release_ways(tmp: Path, key: Path) -> dict[str, Callable[[int], Any]]:
    schema = demo_schema_path()
    frame = pl.read_csv(SAMPLE)

    def where(way: str, i: int) -> dict[str, Path]:
        return {"out": tmp / f"{way}-{i}", "lifetime_ledger": tmp / f"ledger-{way}-{i}"}

    def command(i: int) -> Any:
        w = where("command", i)
        return cli(["release", "--data", str(SAMPLE), "--schema", str(schema), "--key", str(key),
                    "--epsilon", str(EPSILON), "--out", str(w["out"]), "--lifetime-ledger",
                    str(w["lifetime_ledger"])])

    return {"command": command,
            "api, file": lambda i: selpe_audit.release(
                SAMPLE, schema, epsilon=EPSILON, key=key, **where("file", i)),
            "api, DataFrame": lambda i: selpe_audit.release(
                frame, schema, epsilon=EPSILON, key=key, dataset="ed_triage_sample",
                **where("frame", i))}


def _decode_ways(tmp: Path, art: Path, pub: Path, n: int) -> dict[str, Callable[[int], Any]]:
    opened = selpe_audit.open_artifact(art, trust=[pub])
    return {"command": lambda i: cli(["decode", str(art), "--trust", str(pub), "--n", str(n),
                                      "--decoder", "model", "--seed", str(i), "--out",
                                      str(tmp / f"decode-{i}.parquet")]),
            "api, sample": lambda i: opened.sample(n, decoder="model", seed=i, progress=False)}


def _timed(ways: dict[str, Callable[[int], Any]], repeats: int) -> dict[str, float]:
    """Median seconds per way; one warm-up round first (models loaded, caches filled)."""
    times: dict[str, list[float]] = {k: [] for k in ways}
    for i in range(repeats + 1):
        for name, way in ways.items():
            seconds = _quiet(lambda way=way, i=i: way(i))
            if i:
                times[name].append(seconds)
    return {k: statistics.median(v) for k, v in times.items()}


def run(quick: bool = False, repeats: int = 5) -> dict[str, Any]:
    repeats, n = (1, 1_000) if quick else (repeats, 10_000)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        key, pub, _ = selpe_audit.generate_keypair(tmp / "release.pem")
        release_s = _timed(_release_ways(tmp, key), repeats)
        decode_s = _timed(_decode_ways(tmp, tmp / "file-0", pub, n), repeats)
    rows = [("release (demo, 400 rows)", way, s, s / release_s["command"])
            for way, s in release_s.items()]
    rows += [(f"decode (model, {n:,} rows)", way, s, s / decode_s["command"])
             for way, s in decode_s.items()]
    table = ("| job | way | median s | x command |\n|---|---|---|---|\n"
             + "\n".join(f"| {job} | {way} | {s:.2f} | {r:.3f} |" for job, way, s, r in rows))
    worst = max(r for _, way, _, r in rows if way != "command")
    summary = (f"The Python API against the command in one process ({repeats} repeat(s), "
               f"medians): at most {worst:.3f}x the command's time (target 1.05).")
    return {"repeats": repeats, "n": n, "release_s": release_s, "decode_s": decode_s,
            "worst_ratio": worst, "table": table, "summary": summary}


BENCHMARK = Benchmark("api", run)
