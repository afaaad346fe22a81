"""Decode throughput and fidelity, measured side by side in one run.

    python -m benchmarks --only decode [--quick] [--set n=200] [--set llm_n=N]
        [--set artifact=DIR --set trust=KEY.pub.pem]

1. The artifact: by default a pool-mode release of the bundled demo sample (epsilon 2, half
   for counts, half for SelPE selection over a public pool of 600 fictional rows) built in a
   temporary folder with a fresh key; or an existing one (``--set artifact=DIR --set trust=PEM``).
2. Throughput: candidates per second of each decoder, each making N x 2 candidates
   (over-generation 2): the marginals decoder, the model decoder (the release's counts
   model), the LLM decoder as it runs by default on such an artifact (hybrid: fields from
   the model, the LLM writes only the free text) and the earlier LLM decoder on the same
   artifact (``--whole-records``: two-stage generation of whole records). Only generation
   is timed; the models and the embedder are loaded before. Per decoder also the share of
   distinct free texts among its candidates and, for the LLM, the texts refused as
   placeholders. Then three more pairs (hybrid, then whole records, N / 5 each, seeds 0-2)
   run back to back: the median of their ratios is the speed-up less the machine's drift.
3. Fidelity: for each decoder's candidates, N output rows under four selections - none (the
   first rows of each class), SelectTop, the fit, SelectTop + fit - and their total
   variation distance to the released class-conditional histograms (mean over fields) and
   to the released cohort x class counts (`decode.fidelity`).

``--quick`` (smoke test): N = 60 for the marginals decoder, 2 rows for the LLM (the one
speed-up pair is those runs), a smaller release (of the sample's first 120 rows). The LLM
part is slow on a CPU (about 0.1-0.3 records/s on 2 cores); ``--set llm_n=N`` sets its N on
its own.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.suite import Benchmark, Result, fmt, markdown_table
from decode.fidelity import released_tvd
from decode.pipeline import DecodeSettings, make_decoder, plan, select
from decode.released import Released, released_view
from decode.select_top import artifact_kernel
from selpe_audit.artifact.document import read_release
from selpe_audit.demo.generator import generate_rows
from selpe_audit.kernel.distance import Kernel
from selpe_audit.models import shared

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {"none": (False, False), "select_top": (True, False), "fit": (False, True),
            "select_top+fit": (True, True)}


def build_artifact(folder: Path, quick: bool) -> tuple[Path, Path]:
    """A pool-mode demo release (the benchmark may import release; decode may not)."""
    from release.config_file import load_config
    from release.pipeline import run_release
    from selpe_audit.artifact.signing import generate_keypair
    from selpe_audit.schema import demo_schema_path

    priv, pub, _ = generate_keypair(folder / "release.pem")
    pool = folder / "pool.jsonl"
    rows = generate_rows(200 if quick else 600, seed=12345)
    pool.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "patient_id"}) + "\n"
                            for r in rows))
    extra: dict[str, Any] = {"rounds": 2, "k": 2} if quick else {}
    if quick:  # the sample's first 120 rows: less to embed (one row at a time) in a smoke run
        extra["data"] = folder / "members.csv"
        sample = ROOT / "selpe_audit" / "data" / "ed_triage_sample.csv"
        pl.read_csv(sample, infer_schema=False).head(120).write_csv(extra["data"])
    cfg = load_config(ROOT / "examples" / "release.toml", {
        "schema": demo_schema_path(), "release_key": priv, "out": folder / "art",
        "lifetime_ledger": folder / "ledger", "candidates": pool, "counts_share": 0.5,
        "selection_share": 0.5, **extra})
    run_release(cfg)
    return cfg.out, pub


def _candidates(released: Released,
                settings: DecodeSettings) -> tuple[dict, float, float, dict | None]:
    """All candidates of one decoder, the seconds generation took, its validity and (LLM
    decoders) its counters."""
    decoder = make_decoder(released, settings)
    counts = plan(released, settings.n, settings.overgenerate).candidates
    cand: dict[Any, list[dict]] = {c: [] for c in released.classes}
    t0 = time.perf_counter()
    for c, m in counts.items():
        decoder.generate(c, 0, m, cand[c].append)
    stats = getattr(decoder, "stats", None)
    return (cand, time.perf_counter() - t0, decoder.validity,
            stats.as_dict() if stats is not None else None)


def _fidelity(released: Released, cand: dict, settings: DecodeSettings,
              kernel: Kernel | None) -> dict[str, Any]:
    rows = plan(released, settings.n, settings.overgenerate).rows
    out = {}
    for name, (top, fit) in VARIANTS.items():
        t0 = time.perf_counter()
        chosen = select(released, cand, rows, replace(settings, select_top=top, fit=fit),
                        kernel if top else None)
        records = [r for c in released.classes for r in chosen.syn_rows[c]]
        tvd = released_tvd(released, records)
        out[name] = {"tvd_histograms": tvd["histograms_mean"], "tvd_cohorts": tvd["cohorts"],
                     "seconds": time.perf_counter() - t0, "rows": len(records)}
    return out


def run(quick: bool = False, n: int = 200, llm_n: int | None = None,
        artifact: str | Path | None = None, trust: str | Path | None = None) -> dict[str, Any]:
    """Measure both decoders; print a table; return the numbers."""
    if quick:
        n = min(n, 60)
    llm_n = llm_n if llm_n is not None else (2 if quick else n)
    with tempfile.TemporaryDirectory() as tmp:
        if artifact is None:
            artifact, trust = build_artifact(Path(tmp), quick)
        if trust is None:
            raise ValueError("an artifact needs its trusted key: --set trust=KEY.pub.pem")
        released = released_view(read_release(Path(artifact), [Path(trust)]))
        kernel = artifact_kernel(released, shared())[0] if released.kernel is not None else None
        result: dict[str, Any] = {"n": n, "llm_n": llm_n, "overgenerate": 2.0}
        for name, settings in _decoders(released, n, llm_n):
            cand, seconds, validity, stats = _candidates(released, settings)
            made = sum(len(v) for v in cand.values())
            result[name] = {"candidates": made, "seconds": seconds,
                            "records_per_s": made / seconds if seconds else None,
                            "validity": validity,
                            "distinct_text_share": _distinct_texts(released, cand),
                            **({"llm": stats} if stats else {}),
                            "fidelity": _fidelity(released, cand, settings, kernel)}
        if "llm-whole-records" in result:
            result["hybrid_speedup"] = (result["llm"]["records_per_s"]
                                        / result["llm-whole-records"]["records_per_s"])
            result["speedup_repeats"] = (_first_pair(result) if quick else
                                         _speedup_repeats(released, max(4, llm_n // 5),
                                                          REPEATS))
    _print(result)
    return result


REPEATS = 3  # paired throughput repeats: hybrid, then whole records, side by side


def _speedup_repeats(released: Released, n: int, repeats: int) -> dict[str, Any]:
    """The hybrid decoder's records/s over the whole-record decoder's in ``repeats`` pairs
    run back to back (N = ``n`` each, seed = the repeat): a shared machine's load drifts,
    so each ratio compares two runs minutes apart; the median is the figure."""
    ratios = []
    for seed in range(repeats):
        rate = {}
        for hybrid in (True, False):
            settings = DecodeSettings(n=n, decoder="llm", hybrid=hybrid, seed=seed)
            cand, seconds, _, _ = _candidates(released, settings)
            rate[hybrid] = sum(len(v) for v in cand.values()) / seconds
        ratios.append(rate[True] / rate[False])
    return {"n": n, "ratios": ratios, "median": float(np.median(ratios))}


def _first_pair(result: dict[str, Any]) -> dict[str, Any]:
    """The smoke run's one pair: the hybrid and whole-record runs above (no more LLM runs)."""
    ratio = result["hybrid_speedup"]
    return {"n": result["llm_n"], "ratios": [ratio], "median": ratio}


def _decoders(released: Released, n: int, llm_n: int) -> list[tuple[str, DecodeSettings]]:
    """(name, settings) of every decoder the artifact supports, cheapest first."""
    out = [("marginals", DecodeSettings(n=n, decoder="marginals"))]
    if released.model is not None:
        out += [("model", DecodeSettings(n=n, decoder="model")),
                ("llm", DecodeSettings(n=llm_n, decoder="llm")),
                ("llm-whole-records", DecodeSettings(n=llm_n, decoder="llm", hybrid=False))]
    else:
        out.append(("llm", DecodeSettings(n=llm_n, decoder="llm")))
    return out


def _distinct_texts(released: Released, cand: dict[Any, list[dict]]) -> float | None:
    """Distinct free texts over free texts written, all text fields (None: no text field)."""
    texts = [str(r[f.name]) for rs in cand.values() for r in rs
             for f in released.schema.by_kind("text")]
    return len(set(texts)) / len(texts) if texts else None


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


DECODERS = ("marginals", "model", "llm", "llm-whole-records")


def _print(r: dict[str, Any]) -> None:
    print(f"decode benchmark: marginals and model N = {r['n']}, LLM N = {r['llm_n']}, "
          f"over-generation {r['overgenerate']:g}")
    names = [d for d in DECODERS if d in r]
    for name in names:
        d = r[name]
        print(f"  {name:<18} {d['candidates']} candidates in {d['seconds']:.1f} s = "
              f"{_fmt(d['records_per_s'], '.3g')} records/s, validity {d['validity']:.0%}, "
              f"distinct texts {_fmt(d['distinct_text_share'], '.0%')}")
    if "hybrid_speedup" in r:
        rep = r["speedup_repeats"]
        print(f"  hybrid LLM decoder: {r['hybrid_speedup']:.2f}x the records/s of whole records;"
              f" {len(rep['ratios'])} more pairs at N = {rep['n']}: "
              + ", ".join(f"{x:.2f}x" for x in rep["ratios"]) + f" (median {rep['median']:.2f}x)")
    print("  TVD to the released histograms by selection step: " + ", ".join(names))
    for v in VARIANTS:
        print(f"  {v:<18}" + "".join(f"{_fmt(r[n]['fidelity'][v]['tvd_histograms'], '.4f'):>12}"
                                     for n in names))


def _table(r: Result) -> str:
    steps = ("none", "select_top", "fit", "select_top+fit")
    rows = []
    for dec in ("marginals", "model", "llm", "llm-whole-records"):
        d = r.get(dec)
        if d:
            rate = d["records_per_s"]
            share = d.get("distinct_text_share")
            rows.append((dec, f"{rate:,.0f}" if rate >= 100 else f"{rate:.2f}",
                         f"{d['validity']:.0%}", "-" if share is None else f"{share:.0%}",
                         *(fmt(d["fidelity"][s]["tvd_histograms"]) for s in steps)))
    return markdown_table(("decoder", "records/s", "valid", "distinct texts",
                           *(f"TVD hist. {s}" for s in steps)), rows)


def _summary(r: Result) -> str:
    m, llm = r["marginals"], r["llm"]

    def fit(d: Result) -> str:
        f = d["fidelity"]
        return f"{f['none']['tvd_histograms']:.3f} -> {f['fit']['tvd_histograms']:.3f}"

    rep = r.get("speedup_repeats")
    pairs = (f"; median of {len(rep['ratios'])} more pairs {rep['median']:.2f}x"
             if rep else "")
    speed = (f" (hybrid: fields from the model, LLM text only: {r['hybrid_speedup']:.2f}x the "
             f"whole-record decoder's {r['llm-whole-records']['records_per_s']:.2f}{pairs})"
             if "hybrid_speedup" in r else "")
    return (f"{r['n']} rows: marginals decoder {m['records_per_s']:,.0f} records/s, LLM "
            f"{llm['records_per_s']:.2f} records/s{speed}; the fit takes histogram TVD "
            f"{fit(m)} (marginals), {fit(llm)} (LLM).")


BENCHMARK = Benchmark("decode", run, table=_table, summary=_summary)  # LLM: 400 candidates
