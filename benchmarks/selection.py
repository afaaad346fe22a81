"""Cost and signal of SelPE selection, measured side by side in one run.

    python -m benchmarks --only selection [--quick] [--set batches=10] [--set candidates=10000]

1. Cost of one round's selection for b batches and M candidates: kernel utilities
   (b x M distances) plus one OpenDP noisy max per batch. Candidate features are real
   embeddings of demo-like records, tiled up to M (the distance cost does not depend on
   which vectors they are). Next to it: the cost of featurizing a candidate (embedder)
   and the embedder's dedupe savings.
2. Signal on the demo data (pool mode, one round per class): mean kernel distance of the
   winners to the class's private rows at epsilon = infinity (plain argmax, reported for
   reference only), 2 and 0.1, and of random candidates. Winners at infinity must beat random.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.suite import Benchmark, Result, fmt, markdown_table
from release.dp.noisy_max import make_calibrated_noisy_max
from release.private_data import read_private_rows
from release.selection.selpe import batch_ids
from selpe_audit.demo.generator import generate_rows
from selpe_audit.kernel.distance import Features, Kernel, KernelConfig
from selpe_audit.models import shared
from selpe_audit.schema import demo_schema_path, load_schema

SAMPLE = demo_schema_path().parent / "ed_triage_sample.csv"


def _tile(f: Features, m: int) -> Features:
    idx = np.arange(m) % f.n
    return f.take(idx)


def cost(kernel: Kernel, b: int, m: int, repeats: int) -> dict[str, Any]:
    cand = [{k: v for k, v in r.items() if k != "patient_id"}
            for r in generate_rows(200, seed=11)]
    kernel.featurize(generate_rows(4, seed=13))  # loads the embedder: not a per-candidate cost
    t0 = time.perf_counter()
    feats = kernel.featurize(cand)
    featurize_s = (time.perf_counter() - t0) / len(cand)
    priv = kernel.featurize(generate_rows(300, seed=12))
    cand_m = _tile(feats, m)
    scale = kernel.fit_scale(cand_m)
    ids = [str(i) for i in range(priv.n)]
    util_t, nm_t = [], []
    for r in range(repeats):
        t0 = time.perf_counter()
        centers = kernel.centers(priv, batch_ids(ids, bytes([r]) * 32, b), b)
        u = -kernel.distances(centers, cand_m, scale)
        t1 = time.perf_counter()
        selector = make_calibrated_noisy_max(m, 0.4)
        _ = [selector(np.clip(row, -1, 0).tolist()) for row in u]
        t2 = time.perf_counter()
        util_t.append(t1 - t0)
        nm_t.append(t2 - t1)
    stats = kernel.embedder.stats.to_json() if kernel.embedder else {}
    return {"batches": b, "candidates": m, "utilities_s": statistics.median(util_t),
            "noisy_max_s": statistics.median(nm_t),
            "round_s": statistics.median(util_t) + statistics.median(nm_t),
            "featurize_per_candidate_s": featurize_s,
            "featurize_m_candidates_s_est": featurize_s * m, "embedder": stats}


def signal(kernel: Kernel, schema: Any, pool_size: int, b: int, reps: int) -> dict[str, Any]:
    priv_rows = read_private_rows(SAMPLE, schema).priv_rows
    rng = np.random.default_rng(0)
    pool = [{k: v for k, v in r.items() if k != "patient_id"}
            for r in generate_rows(pool_size * 8, seed=77)]
    out: dict[str, list[float]] = {"inf": [], "2": [], "0.1": [], "random": []}
    for c in schema.classes:
        rows = [r for r in priv_rows if r[schema.label] == c]
        cand = [r for r in pool if r[schema.label] == c][:pool_size]
        if not rows or len(cand) < 2:
            continue
        pf, cf = kernel.featurize(rows), kernel.featurize(cand)
        scale = kernel.fit_scale(cf)
        d_priv = kernel.pairwise(cf, pf, scale).mean(axis=1)  # each candidate vs the class
        for _ in range(reps):
            centers = kernel.centers(pf, batch_ids([r["patient_id"] for r in rows],
                                                   rng.bytes(32), b), b)
            u = -kernel.distances(centers, cf, scale)
            u[centers.empty] = 0.0
            out["inf"] += [float(d_priv[int(np.argmax(row))]) for row in u]
            for eps in ("2", "0.1"):
                sel = make_calibrated_noisy_max(cf.n, float(eps))
                out[eps] += [float(d_priv[sel(np.clip(row, -1, 0).tolist())]) for row in u]
            out["random"] += [float(d_priv[i]) for i in rng.integers(0, cf.n, size=b)]
    return {k: float(np.mean(v)) for k, v in out.items()}


def run(quick: bool = False, batches: int = 10,
        candidates: int | None = None) -> dict[str, Any]:
    b, m = batches, candidates or (500 if quick else 10_000)
    schema = load_schema(demo_schema_path())
    kernel = Kernel(schema, shared().embedder(), KernelConfig())
    result = {"cost": cost(kernel, b, m, 1 if quick else 5),
              "signal_mean_distance": signal(kernel, schema, 12 if quick else 30, 5,
                                             1 if quick else 5)}
    s = result["signal_mean_distance"]
    result["winners_at_inf_beat_random"] = s["inf"] < s["random"]
    return result


def _table(r: Result) -> str:
    c = r["cost"]
    return markdown_table(("batches", "candidates", "utilities (s)", "noisy max (s)",
                           "round (s)", "featurize all candidates (s, est.)"),
                          [(c["batches"], f"{c['candidates']:,}", fmt(c["utilities_s"]),
                            fmt(c["noisy_max_s"]), fmt(c["round_s"]),
                            f"{c['featurize_m_candidates_s_est']:.0f}")])


def _summary(r: Result) -> str:
    beat = "beat" if r.get("winners_at_inf_beat_random") else "do not beat"
    distances = ", ".join(f"{k if k == 'random' else f'eps {k}'} {fmt(v)}"
                          for k, v in r["signal_mean_distance"].items())
    return (f"One selection round over {r['cost']['candidates']:,} candidates takes "
            f"{r['cost']['round_s']:.2f} s; winners at eps = inf {beat} random candidates "
            f"(winners' mean distance to the private rows: {distances}).")


BENCHMARK = Benchmark("selection", run, table=_table, summary=_summary)
