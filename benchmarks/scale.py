"""Release and decode at hospital scale: time and peak memory per stage against N.

    python -m benchmarks --only scale [--quick] [--huge] [--set sizes=10000,100000,1000000]

Per N demo rows (`benchmarks.counts_modes.demo_rows`, seed 7; the 10^7 file, with
``--huge``, is the 10^6 file ten times over with each copy's ids suffixed, so it holds 10^7
rows and 10x as many people), each in a fresh interpreter so its peak RSS is its own:

- a plain ``polars.read_csv`` of the same file (the yardstick for read+validate);
- a counts-only release in the default counts mode (``fixed``, the DP phrase vocabulary on,
  the demo's TOML: person units, cohorts, rates), its stages from the enclave log: read and
  check, the ledger's people, phrase vocabulary and topic codes, the whole counts
  stage, and the release's wall time;
- a model-decoder decode of N records from the 10^5-row artifact (wall time, peak RSS);
- private features (`Kernel.featurize_private`, the full default kernel) of min(N, 10^5)
  rows (10^6 rows would hold 20 GB of per-row vectors: selection runs on fewer rows);

and once, the default path with selection (``release --counts-share 0.5`` with no config:
the plan, LLM candidates, selection, the phrase vocabulary) on 20,000 rows. Cost per row and
growth (the log-log slope between sizes) are in the table; the plot is seconds against N on
log axes.

``--quick``: N = 1,000 and 3,000, no default path (the CI smoke run).
"""

from __future__ import annotations

import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.counts_modes import ROOT, demo_config, demo_rows, demo_settings, release_child
from benchmarks.suite import Benchmark, Plot, Result
from benchmarks.svg import line_chart
from release.installation import DEFAULT_MAX_EPSILON

FULL_SIZES = (10_000, 100_000, 1_000_000)
QUICK_SIZES = (500, 1_000)  # the smoke run: two sizes for a slope, 1,500 rows embedded
HUGE = 10_000_000
DEFAULT_PATH_ROWS = 20_000
FEATURE_ROWS = 100_000
#: stages read from the release's enclave log
STAGES = {"read_check_s": r"read and checked \d+ rows in ([\d.]+) s",
          "people_s": r"charged \d+ people .* in ([\d.]+) s",
          "phrases_s": r"phrase vocabulary and topic codes in ([\d.]+) s",
          "counts_s": r"counts \([\w-]+\) in ([\d.]+) s",
          "features_s": r"private features of \d+ rows in ([\d.]+) s",
          "selection_s": r"selection \([\w-]+\) in ([\d.]+) s"}


# ----- children: one measured job in a fresh interpreter ------------------------------------

def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _child(spec: dict[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    if spec["job"] == "read":
        import polars as pl

        rows = pl.read_csv(spec["data"]).height
    elif spec["job"] == "decode":
        from decode.pipeline import DecodeSettings, run_decode

        rows = run_decode(Path(spec["artifact"]), [Path(spec["trust"])], 0, Path(spec["out"]),
                          DecodeSettings(n=spec["n"], decoder="model")).rows
    elif spec["job"] == "features":
        import polars as pl

        from selpe_audit.kernel.distance import Kernel
        from selpe_audit.models import shared
        from selpe_audit.schema import demo_schema_path, load_schema

        schema = load_schema(demo_schema_path())
        recs = pl.read_csv(spec["data"], n_rows=spec["n"]).drop("patient_id").to_dicts()
        kernel = Kernel(schema, shared().embedder())
        t0 = time.perf_counter()  # the model's load is not the features' cost
        rows = kernel.featurize_private(recs).n
    else:
        raise ValueError(spec["job"])
    return {"seconds": round(time.perf_counter() - t0, 2), "peak_mib": round(_peak_mib(), 1),
            "rows": rows}


def child(spec: dict[str, Any], timeout: float = 3600) -> dict[str, Any]:
    r = subprocess.run([sys.executable, "-m", "benchmarks.scale", "--child", json.dumps(spec)],
                       capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                       env={**os.environ, "NO_COLOR": "1"})
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    if r.returncode != 0 or not lines:
        tail = [line.strip() for line in r.stderr.splitlines() if line.strip()][-3:]
        raise RuntimeError(f"{spec['job']} failed: {' / '.join(tail) or '(no output)'}")
    return json.loads(lines[-1])


def _release(data: Path, folder: Path, key: Path, tag: str,
             config: Path | None) -> dict[str, Any]:
    """One release in a child; its wall time, peak RSS and stage times."""
    import re

    if config is None:  # the default path with selection: no TOML, the default but the split
        # and the vocabulary, which runs at every size here (the plan would skip it on the
        # small tables), so that each stage is timed at every n
        settings = {"data": data, "out": folder / f"rel-{tag}", "release_key": key,
                    "counts_share": 0.5, "selection_share": 0.5, "phrases": True,
                    "lifetime_ledger": folder / f"ledger-{tag}", "dataset": f"demo-{tag}",
                    "enclave_log": folder / f"{tag}.log",
                    "schema": ROOT / "selpe_audit" / "data" / "ed_triage.schema.json",
                    # a real installation's default cap (the benchmark child's has none)
                    "lifetime_epsilon": DEFAULT_MAX_EPSILON}
    else:
        # no embedded topic anchors: a free-text field gets the DP phrase vocabulary, run
        # at every size (the plan would skip it on small tables)
        settings = {**demo_settings(data, folder, key, "fixed", tag, None), "topics": 0,
                    "phrases": True}
    r = release_child(settings, config)
    log = Path(settings["enclave_log"]).read_text()
    stages = {k: (float(m[-1]) if (m := re.findall(p, log)) else None)
              for k, p in STAGES.items()}
    return {"seconds": r["seconds"], "peak_mib": r["peak_rss_mib"], **stages,
            "artifact": str(settings["out"])}


def huge_rows(base: Path, copies: int = 10) -> Path:
    """``copies`` x the rows of ``base`` (the 10^6-row file), each copy's ids suffixed
    (``-k``): a file as big as a big hospital's, made in seconds (the generator would take
    an hour)."""
    import polars as pl

    path = base.with_name(f"{base.stem}-x{copies}.csv")
    if not path.exists():
        df = pl.read_csv(base, infer_schema=False)
        tmp = path.with_suffix(".tmp.csv")
        pl.concat([df.with_columns(pl.col("patient_id") + f"-{k}") for k in range(copies)]
                  ).write_csv(tmp)
        tmp.replace(path)
    return path


# ----- the run ---------------------------------------------------------------------------------

def run(quick: bool = False, sizes: int | Sequence[int] | None = None,
        huge: bool = False) -> dict[str, Any]:
    from selpe_audit.artifact.signing import generate_keypair

    sizes = [sizes] if isinstance(sizes, int) else list(sizes or (QUICK_SIZES if quick
                                                                  else FULL_SIZES))
    out: dict[str, Any] = {"sizes": sizes, "rows": []}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        key, trust, _ = generate_keypair(folder / "release.pem")
        files = {n: demo_rows(n) for n in sizes}
        if huge:
            files[HUGE] = huge_rows(demo_rows(HUGE // 10))
        decode_source = None
        for n, data in files.items():
            row: dict[str, Any] = {"n": n, "plain_read": child({"job": "read", "data": str(data)})}
            row["release"] = _release(data, folder, key, f"counts-{n}", demo_config())
            if decode_source is None or n == min(sizes, key=lambda m: abs(m - 100_000)):
                decode_source = row["release"]["artifact"]
            out["rows"].append(row)
        for row in out["rows"]:
            n = row["n"]
            if n != HUGE:
                row["decode"] = child({"job": "decode", "artifact": decode_source,
                                       "trust": str(trust), "n": n,
                                       "out": str(folder / f"decoded-{n}.parquet")})
                m = min(n, FEATURE_ROWS)
                row["features"] = {**child({"job": "features", "data": str(files[n]), "n": m}),
                                   "rows": m}
        if not quick:  # the LLM's candidates: minutes, not a smoke run's
            small = folder / f"default-{DEFAULT_PATH_ROWS}.csv"
            _head(files[max(sizes)] if max(sizes) >= DEFAULT_PATH_ROWS else
                  demo_rows(DEFAULT_PATH_ROWS), DEFAULT_PATH_ROWS, small)
            out["default_path"] = {"n": DEFAULT_PATH_ROWS,
                                   **_release(small, folder, key, "default", None)}
    out["table"] = table(out)
    out["summary"] = summary(out)
    return out


def _head(data: Path, n: int, out: Path) -> None:
    import polars as pl

    pl.read_csv(data, infer_schema=False, n_rows=n).write_csv(out)


# ----- the page ----------------------------------------------------------------------------------

def _slope(xs: list[float], ys: list[float | None]) -> float | None:
    """The log-log slope between the two largest sizes (1 = linear in N)."""
    pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y]
    if len(pts) < 2:
        return None
    (x0, y0), (x1, y1) = pts[-2], pts[-1]
    return math.log(y1 / y0) / math.log(x1 / x0)


def _s(x: float | None) -> str:
    return "" if x is None else f"{x:.1f}" if x >= 1 else f"{x:.2f}"


def table(r: dict[str, Any]) -> str:
    head = ("| N | plain read s | read+check s (x read) | ledger people s | phrases s | "
            "counts s | release s / GiB | decode model s / GiB | features ms/row |")
    lines = [head, "|" + "---|" * 9]
    for row in r["rows"]:
        rel, plain = row["release"], row["plain_read"]
        ratio = f" ({rel['read_check_s'] / plain['seconds']:.1f}x)" \
            if rel.get("read_check_s") and plain["seconds"] else ""
        dec, feat = row.get("decode"), row.get("features")
        lines.append(
            f"| {row['n']:,} | {_s(plain['seconds'])} | {_s(rel['read_check_s'])}{ratio} | "
            f"{_s(rel.get('people_s'))} | {_s(rel['phrases_s'])} | {_s(rel['counts_s'])} | "
            f"{_s(rel['seconds'])} / {rel['peak_mib'] / 1024:.2f} | "
            + (f"{_s(dec['seconds'])} / {dec['peak_mib'] / 1024:.2f}" if dec else "")
            + " | " + (f"{1000 * feat['seconds'] / feat['rows']:.2f} ({feat['rows']:,} rows)"
                       if feat else "") + " |")
    return "\n".join(lines)


def summary(r: dict[str, Any]) -> str:
    rows = r["rows"]
    ns = [float(x["n"]) for x in rows]
    slope = _slope(ns, [x["release"]["seconds"] for x in rows])
    big = rows[-1]
    d = r.get("default_path")
    dec = [x for x in rows if "decode" in x]
    parts = [f"counts-only release of {big['n']:,} rows: {big['release']['seconds']:.0f} s, "
             f"{big['release']['peak_mib'] / 1024:.1f} GiB peak"
             + (f" (log-log slope {slope:.2f} over the last step)" if slope else ""),
             f"read+check {big['release']['read_check_s'] / big['plain_read']['seconds']:.1f}x "
             "a plain polars read"]
    if dec:
        last = dec[-1]
        parts.append(f"model decoder {last['n']:,} records in {last['decode']['seconds']:.0f} s "
                     f"({last['decode']['peak_mib'] / 1024:.2f} GiB; "
                     f"{dec[0]['decode']['peak_mib'] / 1024:.2f} GiB at {dec[0]['n']:,})")
    if d:
        parts.append(f"default path with selection on {d['n']:,} rows: {d['seconds']:.0f} s, "
                     "private "
                     f"features {1000 * (d['features_s'] or 0) / d['n']:.2f} ms/row")
    return "; ".join(parts) + "."


def _plots(r: Result) -> list[Plot]:
    rows = r["rows"]
    series = {"plain read": [x["plain_read"]["seconds"] for x in rows],
              "read+check": [x["release"]["read_check_s"] for x in rows],
              "counts": [x["release"]["counts_s"] for x in rows],
              "release": [x["release"]["seconds"] for x in rows],
              "decode (model)": [x.get("decode", {}).get("seconds") for x in rows]}
    logged = {k: [math.log10(v) if v else None for v in vs] for k, vs in series.items()}
    svg = line_chart("Seconds against rows (log-log)", [f"1e{round(math.log10(x['n']))}"
                                                          for x in rows],
                     logged, "log10 seconds", width=640)
    return [("seconds", "Seconds per stage against N, log-log", svg)]


BENCHMARK = Benchmark("scale", run, plots=_plots)  # run(quick, huge=True): 10^7 rows too


if __name__ == "__main__":  # the child each size starts: one stage, measured alone
    print(json.dumps(_child(json.loads(sys.argv[2]))), flush=True)
