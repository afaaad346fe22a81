"""The three selection mechanisms side by side: SelPE, PE's vote histogram, SecPE's
representatives.

    python -m benchmarks --only selection_modes [--quick]

1. Utility and fidelity on the triage demo at small n: for n private rows per class and
   epsilon (the whole budget to selection; delta 1e-6 for the Gaussian modes), each mode
   runs the release's selection (`release.selection.run_selection`, T = 5 rounds, K = 3,
   b = 5, full kernel) over a public pool of fictional records (another seed; no LLM) that
   is class-agnostic: every class draws from all of it, relabelled (`MixedPool`). The
   synthetic set is every round's winners (1 + 2 + ... + T per class). Utility: TSTR macro
   AUC on held-out real demo rows (`audits.utility.evaluate`, both models); fidelity: mean
   class-conditional 1-way and 2-way TVD to the held-out rows (`audits.fidelity`). Next to
   them: random pool candidates (no private data) and the n real rows themselves.
2. Cost of one selection round for n = 100,000 private rows and M = 10,000 candidates per
   mode, split into the public part (OpenDP calibration, k-means skeleton) and the private
   part (the measurement on the private rows). Features are real embeddings tiled up to
   size (the cost does not depend on which vectors they are). pe-histogram computes n x M
   kernel distances: it is timed on fewer rows and scaled linearly (it is linear in n).
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from audits.fidelity import tvds
from audits.utility import evaluate
from benchmarks.suite import Benchmark, Result, markdown_table
from release.config_sections import SelectionConfig
from release.dp.zcdp import calibrate_zcdp_budget
from release.selection import PoolSource, PrivateClasses, get, run_selection
from selpe_audit.artifact.modes import mode_names
from selpe_audit.demo.generator import generate_rows
from selpe_audit.kernel.distance import Features, Kernel, KernelConfig
from selpe_audit.kernel.embeddings import Embedder
from selpe_audit.models import shared
from selpe_audit.schema import Schema, demo_schema_path, load_schema

MODES = mode_names()  # the registered selection modes

DELTA = 1e-6
FULL = {"ns": [5, 10, 20, 50], "epsilons": [1.0, 2.0, 4.0], "reps": 1, "rounds": 5,
        "pool": 500, "test": 500, "cost": (100_000, 10_000, 10_000, 3)}
QUICK = {"ns": [5, 20], "epsilons": [2.0], "reps": 1, "rounds": 3, "pool": 150, "test": 150,
         "cost": (2_000, 500, 500, 1)}  # cost: n, M, rows timed for pe-histogram, repeats
ANCHORS_AT_SCALE = 100  # representatives' anchors in the cost run (SecPE: a few hundred)


class MixedPool(PoolSource):
    """Every class draws its candidates from the whole pool, relabelled: a generator that
    does not know what separates the classes. Selection has to find each class's signal;
    random candidates carry none (TSTR AUC about 0.5)."""

    def generate(self, *, class_value: Any, positives: list[dict], negatives: list[dict],
                 hints: dict[str, str] | None, n: int) -> list[dict]:
        pool = [r for v in self.by_class.values() for r in v]
        idx = self.rng.choice(len(pool), size=n, replace=len(pool) < n)
        return [dict(pool[i], **{self.schema.label: class_value}) for i in idx]


def _record(r: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in r.items() if k != "patient_id"}


def _mean(xs: list[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return float(np.mean(v)) if v else None


# ----- 1. utility and fidelity ------------------------------------------------------------

def _scores(schema: Schema, syn: list[dict], test: list[dict], embedder: Embedder,
            seed: int) -> dict[str, float | None]:
    u = evaluate(schema, syn, test, embedder, seed)
    fields = [f for f in schema.record_fields if f.name != schema.label]
    per_class = [tvds(schema, [r for r in syn if r[schema.label] == c],
                       [r for r in test if r[schema.label] == c], fields)
                 for c in schema.classes]
    return {"auc_tfidf": u["tfidf_logreg"]["macro_auc"],
            "auc_hgb": u["hgb_embeddings"]["macro_auc"],
            "tvd_1way": _mean([p["mean_1way"] for p in per_class]),
            "tvd_2way": _mean([p["mean_2way"] for p in per_class])}


def _private(kernel: Kernel, schema: Schema, rows: list[dict], feats: Features,
             n: int) -> PrivateClasses:
    """The first n rows of each class (features are taken, not recomputed)."""
    idx = {c: [i for i, r in enumerate(rows) if r[schema.label] == c][:n]
           for c in schema.classes}
    return PrivateClasses({c: feats.take(i) for c, i in idx.items() if i},
                          {c: [rows[j]["patient_id"] for j in i] for c, i in idx.items()})


def utility(kernel: Kernel, schema: Schema, ns: list[int], epsilons: list[float], reps: int,
            rounds: int, pool_size: int, test_size: int) -> list[dict[str, Any]]:
    pool = [_record(r) for r in generate_rows(pool_size, seed=101)]
    kernel.featurize(pool)  # warms the embedder's cache: candidates are re-featurized per round
    test = generate_rows(test_size, seed=303)
    n_max = max(ns)
    out: list[dict[str, Any]] = []
    for rep in range(reps):
        draw = generate_rows(n_max * len(schema.classes) * 12, seed=200 + rep)
        rows = [r for c in schema.classes
                for r in [x for x in draw if x[schema.label] == c][:n_max]]
        feats = kernel.featurize(rows)
        per_class_total = sum(SelectionConfig(rounds=rounds).quota(t)
                              for t in range(1, rounds + 1))
        rng = np.random.default_rng(rep)
        rand = [dict(pool[i], **{schema.label: c}) for c in schema.classes
                for i in rng.integers(0, len(pool), per_class_total)]
        base = {"random": _scores(schema, rand, test, kernel.embedder, rep)}
        for n in ns:
            real = [r for c in schema.classes
                    for r in [x for x in rows if x[schema.label] == c][:n]]
            base_n = {**base, "real": _scores(schema, [_record(r) for r in real], test,
                                              kernel.embedder, rep)}
            priv = _private(kernel, schema, rows, feats, n)
            for eps in epsilons:
                res: dict[str, Any] = {"rep": rep, "n": n, "epsilon": eps, **base_n}
                for mode in MODES:
                    cfg = SelectionConfig(rounds=rounds, k=3, batches=5, mode=mode)
                    src = MixedPool(schema, pool, "benchmark", seed=1000 * rep + n)
                    run = run_selection(schema, priv, kernel, src, cfg, eps, DELTA)
                    syn = [w for r in run.rounds for c in r.classes for w in c.winners]
                    res[mode] = _scores(schema, syn, test, kernel.embedder, rep)
                out.append(res)
                print(f"rep {rep} n {n} eps {eps}: " + ", ".join(
                    f"{m} {res[m]['auc_tfidf']:.3f}" for m in (*MODES, "random", "real")),
                    flush=True)
    return out


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Means over repetitions per (n, epsilon)."""
    keys = sorted({(r["n"], r["epsilon"]) for r in runs})
    out = []
    for n, eps in keys:
        group = [r for r in runs if (r["n"], r["epsilon"]) == (n, eps)]
        row: dict[str, Any] = {"n": n, "epsilon": eps, "reps": len(group)}
        for m in (*MODES, "random", "real"):
            row[m] = {k: _mean([g[m][k] for g in group]) for k in group[0][m]}
        out.append(row)
    return out


# ----- 2. cost at scale -------------------------------------------------------------------

def _tile(f: Features, m: int) -> Features:
    return f.take(np.arange(m) % f.n)


def cost(kernel: Kernel, n: int, m: int, pe_rows: int, repeats: int,
         base_c: Features, base_p: Features) -> dict[str, Any]:
    """``base_c``, ``base_p``: real candidate and row features, tiled up to M and n."""
    c = 3
    cand = _tile(base_c, m)
    pools = {c: (cand, kernel.fit_scale(cand))}
    out: dict[str, Any] = {"private_rows": n, "candidates": m, "delta": DELTA,
                           "representatives_anchors": ANCHORS_AT_SCALE, "selpe_batches": 10}
    rho = calibrate_zcdp_budget(1.0, DELTA, [1.0])[0]
    for mode in MODES:
        rows = min(n, pe_rows) if mode == "pe-histogram" else n
        feats = _tile(base_p, rows)
        priv = PrivateClasses({c: feats}, {c: [f"u{i}" for i in range(rows)]})
        cfg = SelectionConfig(rounds=1, k=m, batches=10, mode=mode,
                              settings={"anchors": ANCHORS_AT_SCALE}
                              if mode == "representatives" else None)
        reps = 1 if mode == "pe-histogram" else repeats
        setup, private = [], []
        for _ in range(reps):
            t0 = time.perf_counter()
            measurement, _ = get(mode).round(cfg, kernel, pools, 1,
                                             1.0 if mode == "selpe" else rho)
            t1 = time.perf_counter()
            measurement(priv)
            t2 = time.perf_counter()
            setup.append(t1 - t0)
            private.append((t2 - t1) * n / rows)
        out[mode] = {"public_setup_s": statistics.median(setup),
                     "private_s": statistics.median(private),
                     "round_s": statistics.median(setup) + statistics.median(private),
                     "repeats": reps, "rows_timed": rows,
                     "scaled_to_n": rows < n}
        del priv, feats
        print(f"cost {mode}: {out[mode]['round_s']:.2f} s", flush=True)
    base = out["selpe"]["round_s"]
    for mode in MODES:
        out[mode]["x_selpe"] = out[mode]["round_s"] / base
    return out


# ----- report -----------------------------------------------------------------------------

def run(quick: bool = False) -> dict[str, Any]:
    schema = load_schema(demo_schema_path())
    kernel = Kernel(schema, shared().embedder(), KernelConfig())
    t0 = time.perf_counter()
    size = QUICK if quick else FULL
    runs = utility(kernel, schema, size["ns"], size["epsilons"], size["reps"], size["rounds"],
                   size["pool"], size["test"])
    # the same records as above: the embedder's cache makes these features free
    base_c = kernel.featurize([_record(r) for r in generate_rows(size["pool"], seed=101)])
    base_p = kernel.featurize(generate_rows(size["test"], seed=303))
    cost_ = cost(kernel, *size["cost"], base_c, base_p)
    summary = summarize(runs)
    return {"config": {"delta": DELTA, "sizes": size, "selection": "K = 3, b = 5, T rounds",
                       "epsilon": "the whole budget to selection", "kernel": "full"},
            "summary": summary, "cost": cost_,
            "seconds": time.perf_counter() - t0}


def _table(r: Result) -> str:
    """The largest n per class only (the full grid is in RESULTS.json), plus the cost."""
    summary = r["summary"]
    n = max(s["n"] for s in summary)
    modes = [m for m in ("selpe", "pe-histogram", "representatives", "random", "real")
             if m in summary[0]]
    rows = [(s["epsilon"], *(f"{s[m]['auc_tfidf']:.3f} / {s[m]['tvd_1way']:.3f}" for m in modes))
            for s in summary if s["n"] == n]
    cost = r["cost"]
    return "\n\n".join([
        f"n = {n} per class; each cell TSTR AUC (TF-IDF LR) / mean 1-way TVD:",
        markdown_table(("epsilon", *modes), rows),
        markdown_table(("mode", "round (s)", "x selpe"),
                       [(m, f"{cost[m]['round_s']:.2f}", f"{cost[m]['x_selpe']:.1f}")
                        for m in ("selpe", "pe-histogram", "representatives") if m in cost])])


def _summary(r: Result) -> str:
    c, summary = r["cost"], r["summary"]
    n = max(s["n"] for s in summary)
    best = max(((s[m]["auc_tfidf"], m, s["epsilon"]) for s in summary if s["n"] == n
                for m in ("selpe", "pe-histogram", "representatives")), default=None)
    real = next(s["real"]["auc_tfidf"] for s in summary if s["n"] == n)
    return (f"pe-histogram costs {c['pe-histogram']['x_selpe']:.0f}x and representatives "
            f"{c['representatives']['x_selpe']:.1f}x a selpe round on "
            f"{c['private_rows']:,} rows; at n = {n} per class the best TSTR AUC is "
            f"{best[0]:.3f} ({best[1]}, eps {best[2]:g}) against {real:.3f} for real rows.")


# its own table is the full 12-row grid, twice: the page shows the largest n
BENCHMARK = Benchmark("selection_modes", run, table=_table, summary=_summary)
