"""Does SelPE's selection carry signal? Winners' distance to the private rows vs random.

    python -m benchmarks.selection_signal [--quick] [--json PATH]

For the demo (the bundled 400-row sample as private rows; a pool of fictional rows, another
seed; the real embedder and the demo kernel) and Adult's text-free rows (2,000 training rows
as private rows, the test rows as the public pool, 500 each with --quick; categorical
fields one-hot, numeric fields scaled: no embedder), per selection epsilon, T rounds, b
batches and utility mode ("raw" -g or per-batch "minmax", `release.selection.selpe`), the
release's own code runs T rounds: `SelectionConfig` (K = 3, q = 1: round t draws K m_t
candidates per class from the pool, as `PoolSource` does), the per-round epsilons of
`accounting.round_budgets`, the noise scale of `calibrate_noisy_max_scale` and the OpenDP chain
`batch_votes`. Measured, per (class, round) then averaged: the mean kernel distance to the
class's private rows of the batches' picks (each batch's noisy max), of the round's winners
(the m_t most chosen, what the artifact releases) and of a random candidate (the round's
candidates' mean). Epsilon = inf (noise scale ~1e-6: argmax) is the reference; gap share =
(random - winners) / (random - winners at inf). Every cell of one (dataset, T, b, repeat)
draws the same candidates and batch keys (common random numbers), so cells differ only by
the noise. The demo release at epsilon 2 gives the selection epsilon 1 (counts share 0.5).

Private rows are featurized batched (`Kernel.featurize`): the release encodes them one at
a time (`featurize_private`, ten minutes for 400 rows on 2 busy cores), the same vectors to
rounding. Distances are measured with one numeric scale per class, fitted on its whole pool,
so rounds of different sizes are measured with the same yardstick.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass
from itertools import product
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.adult import INF
from benchmarks.report import SUMMARIES
from release.config_sections import SelectionConfig
from release.dp import enable as enable_opendp
from release.dp.noisy_max import calibrate_noisy_max_scale
from release.private_data import read_private_rows
from release.selection import PrivateClasses, accounting
from release.selection.selpe import batch_votes, most_chosen
from selpe_audit.artifact.modes import SELPE, UTILITIES
from selpe_audit.demo.generator import generate_rows
from selpe_audit.kernel.distance import Features, Kernel, KernelConfig
from selpe_audit.schema import Schema, demo_schema_path, load_schema

SAMPLE = demo_schema_path().parent / "ed_triage_sample.csv"
#: (T, q, b) on the demo, minmax: more winners per class (m_T = ceil(T q)) at a cost in signal
QUOTAS = [(1, 1, 20), (1, 3, 20), (1, 5, 20), (1, 5, 50), (2, 2, 20)]
FULL = {"epsilons": [1.0, 2.0, 4.0], "rounds": [1, 2, 5], "batches": [5, 20, 100],
        "repeats": 8, "demo_pool": 600, "adult_private": 2000, "adult_pool": 6513,
        "quotas": QUOTAS}
QUICK = {"epsilons": [2.0], "rounds": [1, 5], "batches": [5, 20], "repeats": 1,
         "demo_pool": 120, "adult_private": 500, "adult_pool": 500, "quotas": QUOTAS[:2]}
#: the defaults (`SelectionConfig`); the target: winners' gap share >= 0.5 there on the demo
#: at eps 2, minmax. T = 5, b = 5 were the defaults before this table.
DEFAULT = (1, 20)


@dataclass
class Dataset:
    """Private classes, each class's public pool and every pool candidate's mean distance to
    the class's private rows (the yardstick)."""

    name: str
    kernel: Kernel
    priv: PrivateClasses
    pool: dict[Any, Features]
    yard: dict[Any, np.ndarray]


def _dataset(name: str, schema: Schema, kernel: Kernel, priv_rows: list[dict], ids: list[str],
             pool_rows: list[dict]) -> Dataset:
    classes = [c for c in schema.classes
               if any(r[schema.label] == c for r in priv_rows)
               and sum(r[schema.label] == c for r in pool_rows) >= 2]
    feats, unit_ids, pool, yard = {}, {}, {}, {}
    for c in classes:
        rows = [j for j, r in enumerate(priv_rows) if r[schema.label] == c]
        feats[c] = kernel.featurize([priv_rows[j] for j in rows])
        unit_ids[c] = [ids[j] for j in rows]
        pool[c] = kernel.featurize([r for r in pool_rows if r[schema.label] == c])
        yard[c] = kernel.pairwise(pool[c], feats[c], kernel.fit_scale(pool[c])).mean(axis=1)
    return Dataset(name, kernel, PrivateClasses(feats, unit_ids), pool, yard)


def demo(pool_size: int) -> Dataset:
    """The bundled sample (private) and fictional rows of another seed (public pool)."""
    from selpe_audit.models import shared

    schema = load_schema(demo_schema_path())
    priv_rows = read_private_rows(SAMPLE, schema).priv_rows
    pool = [{k: v for k, v in r.items() if k != "patient_id"}
            for r in generate_rows(pool_size, seed=77)]
    return _dataset("demo", schema, Kernel(schema, shared().embedder(), KernelConfig()), priv_rows,
                    [str(r["patient_id"]) for r in priv_rows], pool)


class OneHot:
    """A `TextEncoder` for categorical values: one axis per lexicalised value, so a field
    channel's distance is 0 (same value) or 1/2 (another), with no embedder."""

    def __init__(self, texts: list[str]) -> None:
        self.index = {t: i for i, t in enumerate(dict.fromkeys(texts))}

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), len(self.index)), dtype=np.float32)
        out[np.arange(len(texts)), [self.index[t] for t in texts]] = 1.0
        return out


def adult(n_private: int, n_pool: int) -> Dataset:
    """Adult: a sample of the training rows (private, row units) and of the test rows
    (public pool); categorical fields one-hot, numeric fields scaled, equal weights."""
    import polars as pl

    from benchmarks import adult as data

    paths = [data.CACHE / f for f in ("train.csv", "test.csv", "adult.schema.json")]
    if not all(p.exists() for p in paths):  # else read the cache: load() rewrites it
        data.load()
    train, test = pl.read_csv(paths[0]), pl.read_csv(paths[1])
    schema = load_schema(paths[2])
    cats = [f for f in schema.by_kind("categorical") if f.name != schema.label]
    nums = schema.by_kind("numeric")
    channels = [f"field:{f.name}" for f in cats] + [f"num:{f.name}" for f in nums]
    kernel = Kernel(schema, OneHot([schema.lexicalize(f.name, v) for f in cats for v in f.enum]),
                    KernelConfig(weights={ch: 1.0 / len(channels) for ch in channels}))
    priv = train.sample(n_private, seed=1).to_dicts()
    pool = test.sample(min(n_pool, test.height), seed=2).to_dicts()
    return _dataset("adult", schema, kernel, priv, [str(i) for i in range(len(priv))], pool)


def rounds(ds: Dataset, cfg: SelectionConfig, epsilon: float, seed: int) -> dict[str, float]:
    """T release rounds at selection ``epsilon``: mean distance to the private rows of the
    batches' picks, the winners and a random candidate, one value per (class, round)."""
    rng = np.random.default_rng(seed)  # candidates and batch keys: the same in every cell
    out: dict[str, list[float]] = {"picks": [], "winners": [], "random": []}
    for t, eps_t in enumerate(accounting.round_budgets(SELPE, cfg, epsilon, 0.0), start=1):
        m_t, n = cfg.quota(t), cfg.k * cfg.quota(t)
        idx = {c: rng.choice(p.n, size=n, replace=p.n < n) for c, p in ds.pool.items()}
        pools = {c: (ds.pool[c].take(i), ds.kernel.fit_scale(ds.pool[c].take(i)))
                 for c, i in idx.items()}
        votes = batch_votes(ds.priv, ds.kernel, pools, cfg.batches, eps_t,
                            calibrate_noisy_max_scale(n, eps_t), rng.bytes(32),
                            cfg.settings.utility)
        for c, v in votes.items():
            d = ds.yard[c][idx[c]]
            out["picks"].append(float(d[v].mean()))
            out["winners"].append(float(d[most_chosen(v)[:m_t]].mean()))
            out["random"].append(float(d.mean()))
    return {k: float(np.mean(v)) for k, v in out.items()}


def _share(random: float, x: float, at_inf: float) -> float | None:
    gap = random - at_inf
    return (random - x) / gap if gap > 1e-9 else None


def grid(ds: Dataset, s: dict[str, Any]) -> list[dict[str, Any]]:
    """Every (epsilon, T, b, utility) cell, means over the repeats, with the eps-inf
    reference of its (T, b)."""
    cells = []
    for t, b in product(s["rounds"], s["batches"]):
        runs: dict[Any, list[dict[str, float]]] = {}
        for rep in range(s["repeats"]):
            seed = 1000 * rep + 10 * t + b
            runs.setdefault("inf", []).append(rounds(
                ds, SelectionConfig(rounds=t, batches=b), INF, seed))
            for eps, u in product(s["epsilons"], UTILITIES):
                runs.setdefault((eps, u), []).append(rounds(
                    ds, SelectionConfig(rounds=t, batches=b, settings={"utility": u}), eps, seed))
        mean = {k: {m: float(np.mean([r[m] for r in v])) for m in v[0]} for k, v in runs.items()}
        inf = mean.pop("inf")
        for (eps, u), m in mean.items():
            cells.append({"dataset": ds.name, "epsilon": eps, "T": t, "b": b, "utility": u,
                          **m, "picks_inf": inf["picks"], "winners_inf": inf["winners"],
                          "share_picks": _share(m["random"], m["picks"], inf["picks"]),
                          "share_winners": _share(m["random"], m["winners"],
                                                  inf["winners"])})
    return cells


def quota_grid(ds: Dataset, s: dict[str, Any]) -> list[dict[str, Any]]:
    """Winners' signal when a class gets more than one winner: each (T, q, b) of
    ``s["quotas"]`` at selection eps 1 and 2 (minmax), means over the repeats."""
    cells = []
    for t, q, b in s["quotas"]:
        runs: dict[Any, list[dict[str, float]]] = {}
        for rep in range(s["repeats"]):
            seed = 1000 * rep + 10 * t + b
            for eps in ("inf", *[e for e in s["epsilons"] if e <= 2.0]):
                cfg = SelectionConfig(rounds=t, q=q, batches=b, settings={"utility": "minmax"})
                runs.setdefault(eps, []).append(rounds(ds, cfg, INF if eps == "inf" else eps,
                                                       seed))
        mean = {k: {m: float(np.mean([r[m] for r in v])) for m in v[0]} for k, v in runs.items()}
        inf = mean.pop("inf")
        for eps, m in mean.items():
            cells.append({"dataset": ds.name, "epsilon": eps, "T": t, "q": q, "b": b,
                          "winners_per_class": SelectionConfig(rounds=t, q=q).quota(t), **m,
                          "winners_inf": inf["winners"],
                          "share_winners": _share(m["random"], m["winners"], inf["winners"])})
    return cells


def quota_table(cells: list[dict[str, Any]]) -> str:
    head = ["sel. eps", "T", "q", "b", "winners per class", "random", "winners eps inf",
            "winners (gap share)"]
    rows = [[f"{c['epsilon']:g}", c["T"], c["q"], c["b"], c["winners_per_class"],
             _f(c["random"]), _f(c["winners_inf"]),
             f"{_f(c['winners'])} ({_f(c['share_winners'], 2)})"] for c in cells]
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
                      *("| " + " | ".join(str(x) for x in r) + " |" for r in rows)])


def _f(x: float | None, places: int = 3) -> str:
    return "-" if x is None else f"{x:.{places}f}"


def table(cells: list[dict[str, Any]]) -> str:
    """One row per (dataset, epsilon, T, b); per utility: winners' and picks' distance, each
    with its gap share in brackets."""
    by = {(c["dataset"], c["epsilon"], c["T"], c["b"], c["utility"]): c for c in cells}
    head = ["dataset", "sel. eps", "T", "b", "random", "winners eps inf",
            *(f"{u} {w}" for u in UTILITIES for w in ("winners", "picks"))]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for d, e, t, b in dict.fromkeys(k[:4] for k in by):
        first = by[d, e, t, b, UTILITIES[0]]
        row = [d, f"{e:g}", t, b, _f(first["random"]), _f(first["winners_inf"])]
        for u in UTILITIES:
            c = by[d, e, t, b, u]
            row += [f"{_f(c[w])} ({_f(c[f'share_{w}'], 2)})" for w in ("winners", "picks")]
        lines.append("| " + " | ".join(str(x) for x in row) + " |")
    return "\n".join(lines)


def run(quick: bool = False, repeats: int | None = None) -> dict[str, Any]:
    s = dict(QUICK if quick else FULL, **({} if repeats is None else {"repeats": repeats}))
    t0 = time.perf_counter()
    sets = [demo(s["demo_pool"]), adult(s["adult_private"], s["adult_pool"])]
    setup_s = time.perf_counter() - t0
    cells = [c for ds in sets for c in grid(ds, s)]
    quotas = quota_grid(sets[0], s)
    dflt = next((c for c in cells if c["dataset"] == "demo" and c["epsilon"] == 2.0
                 and (c["T"], c["b"], c["utility"]) == (*DEFAULT, "minmax")), None)
    result: dict[str, Any] = {
        "settings": {**s, "k": SelectionConfig().k, "q": SelectionConfig().q,
                     "epsilon_inf": INF},
        "private_rows": {ds.name: sum(f.n for f in ds.priv.priv_features.values())
                         for ds in sets},
        "setup_s": setup_s, "grid_s": time.perf_counter() - t0 - setup_s,
        "cells": cells, "table": table(cells), "quotas": quotas,
        "quota_table": quota_table(quotas),
        "target_met": None if dflt is None else (dflt["share_winners"] or 0.0) >= 0.5}
    result["summary"] = SUMMARIES["selection_signal"](result)  # the page's line (report.py)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description="SelPE selection signal: winners vs random")
    ap.add_argument("--quick", action="store_true", help="eps 2, T 1/5, b 5/20, one repeat")
    ap.add_argument("--repeats", type=int, help="repeats per cell (default 8; 1 with --quick)")
    ap.add_argument("--json", help="write the full result here")
    ap.add_argument("--quotas-only", action="store_true",
                    help="only the demo's (T, q, b) quota table, merged into "
                         "benchmarks/RESULTS.json's selection_signal entry")
    args = ap.parse_args()
    if args.quotas_only:
        _quotas_only(args.quick, args.repeats)
        return
    r = run(args.quick, args.repeats)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(r, f, indent=2)
    print(r["table"])
    print(r["summary"])


def _quotas_only(quick: bool, repeats: int | None) -> None:
    """The quota table alone (4 minutes), added to the recorded full run's entry."""
    from pathlib import Path

    from benchmarks.report import write_results

    s = dict(QUICK if quick else FULL, **({} if repeats is None else {"repeats": repeats}))
    cells = quota_grid(demo(s["demo_pool"]), s)
    print(quota_table(cells))
    page = Path(__file__).with_name("RESULTS.md")
    entries = json.loads(page.with_suffix(".json").read_text())
    entries["selection_signal"]["result"] |= {"quotas": cells, "quota_table": quota_table(cells)}
    write_results(page, entries, list(entries))  # the page's order as recorded


if __name__ == "__main__":
    enable_opendp()  # OpenDP's contrib features, once, at the command's entry
    main()
