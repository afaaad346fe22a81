"""UCI Adult, the CoRTeC headline: train on synthetic, test on real, next to a real sample.

    python -m benchmarks.adult_tstr [--epsilons 1,2,4,inf] [--quick]

For each epsilon: a counts-only release of the 26,048 training rows (row unit; class
balance and class-conditional histograms over public bins), then the no-LLM marginals
decoder with the CoRTeC-style fit to 26,048 rows, then macro ROC AUC of logistic
regression (TF-IDF of the record) and gradient boosting on the 6,513 test rows, each next
to the same model trained on a real sample of the same size. "inf" is a release at
epsilon = 1e6 (noise scale 1e-5 rows: exact counts for every practical purpose) - OpenDP
has no epsilon = infinity. The LLM decoder is not run here (see benchmarks.decode).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from audits.utility import run_utility
from benchmarks.adult import CACHE, load
from decode.pipeline import DecodeSettings, run_decode
from release.config import load_config
from release.pipeline import run_release
from release.private_data import read_private_rows
from selpe_audit.schema import load_schema
from selpe_audit.signing import generate_keypair

INF = 1e6


def run(epsilons: list[float], quick: bool = False) -> dict[str, Any]:
    train, test, schema_path = load()
    schema = load_schema(schema_path)
    if quick:
        train.head(2000).write_csv(CACHE / "train_quick.csv")
        test.head(1000).write_csv(CACHE / "test_quick.csv")
    train_path = CACHE / ("train_quick.csv" if quick else "train.csv")
    test_path = CACHE / ("test_quick.csv" if quick else "test.csv")
    real_train = read_private_rows(train_path, schema).priv_rows
    real_test = read_private_rows(test_path, schema).priv_rows
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        priv, pub, _ = generate_keypair(t / "release.pem")
        for eps in epsilons:
            cfg = load_config(None, {
                "data": train_path, "schema": schema_path, "dataset": f"adult-{eps}",
                "out": t / f"rel-{eps}", "release_key": priv, "epsilon": eps,
                "counts_share": 1.0, "selection_share": 0.0, "lifetime_epsilon": 2 * INF,
                "lifetime_ledger": t / "ledger"})
            run_release(cfg)
            out = t / f"syn-{eps}.parquet"
            run_decode(cfg.out, [pub], 0, out,
                       DecodeSettings(n=len(real_train), decoder="marginals", seed=0))
            syn = read_private_rows(out, schema).priv_rows
            u = run_utility(schema, syn, real_train, real_test, None, seed=0)
            results.append({"epsilon": "inf" if eps == INF else eps,
                            **{m: {"synthetic": v["synthetic"]["macro_auc"],
                                   "real_sample": v["real_sample"]["macro_auc"],
                                   "gap": v["gap"]} for m, v in u["models"].items()}})
    return {"train_rows": len(real_train), "test_rows": len(real_test), "results": results,
            "decoder": "marginals + CoRTeC-style fit", "cortec_reported_gap_at_eps_2": 0.02}


def main() -> None:
    ap = argparse.ArgumentParser(description="Adult TSTR AUC vs a real sample")
    ap.add_argument("--epsilons", default="1,2,4,inf")
    ap.add_argument("--quick", action="store_true", help="2,000 train / 1,000 test rows")
    args = ap.parse_args()
    eps = [INF if e.strip() == "inf" else float(e) for e in args.epsilons.split(",")]
    r = run(eps, args.quick)
    print(json.dumps(r, indent=2))
    for row in r["results"]:
        print(f"eps={row['epsilon']}: " + "; ".join(
            f"{m}: synthetic {v['synthetic']:.3f} vs real {v['real_sample']:.3f} "
            f"(gap {v['gap']:.3f})" for m, v in row.items() if m != "epsilon"))


if __name__ == "__main__":
    main()
