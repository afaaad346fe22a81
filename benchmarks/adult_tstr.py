"""UCI Adult, the CoRTeC headline: train on synthetic, test on real, next to a real sample.

    python -m benchmarks.adult_tstr [--epsilons 1,2,4,inf] [--quick]

For each epsilon: a counts-only release of the 26,048 training rows (row unit; counts mode
"marginals": class balance and class-conditional histograms over public bins - the other
counts modes side by side are `benchmarks.counts_modes`), then the no-LLM marginals
decoder with the CoRTeC-style fit to 26,048 rows, then macro ROC AUC of logistic
regression (TF-IDF of the record) and gradient boosting on the 6,513 test rows, each next
to the same model trained on a real sample of the same size (and the standard evaluator's
gaps: one-hot LR, GB on native categoricals; `audits.utility`). "inf" is a release at
epsilon = 1e6 (noise scale 1e-5 rows: exact counts for every practical purpose) - OpenDP
has no epsilon = infinity. The LLM decoder on Adult was benchmarks.adult_llm (retired; RESULTS.md).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from audits.utility import run_utility
from benchmarks.adult import counts_release, fmt, label, parse_epsilons, split_paths
from decode.pipeline import DecodeSettings, run_decode
from release.dp import enable as enable_opendp
from release.private_data import read_private_rows
from selpe_audit.artifact.signing import generate_keypair
from selpe_audit.schema import load_schema


def run(epsilons: list[float], quick: bool = False) -> dict[str, Any]:
    train_path, test_path, schema_path = split_paths(quick)
    schema = load_schema(schema_path)
    real_train = read_private_rows(train_path, schema).priv_rows
    real_test = read_private_rows(test_path, schema).priv_rows
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        priv, pub, _ = generate_keypair(t / "release.pem")
        for eps in epsilons:
            artifact = counts_release(train_path, schema_path, eps, t, priv, "marginals")
            out = t / f"syn-{eps}.parquet"
            run_decode(artifact, [pub], 0, out,
                       DecodeSettings(n=len(real_train), decoder="marginals", seed=0))
            syn = read_private_rows(out, schema).priv_rows
            u = run_utility(schema, syn, real_train, real_test, None, seed=0)
            results.append({"epsilon": label(eps),
                            **{m: {"synthetic": v["synthetic"]["macro_auc"],
                                   "real_sample": v["real_sample"]["macro_auc"],
                                   "gap": v["gap"]} for m, v in u["models"].items()}})
    return {"train_rows": len(real_train), "test_rows": len(real_test), "results": results,
            "counts_mode": "marginals", "decoder": "marginals + CoRTeC-style fit",
            "cortec_reported_gap_at_eps_2": 0.02,
            "table": table(results)}


def table(results: list[dict[str, Any]]) -> str:
    """Markdown: TSTR AUC of each model next to a real sample of the same size, and the gap;
    then the standard evaluator's gaps (one-hot LR, GB on native categoricals)."""
    std = all("onehot_logreg" in r for r in results)
    lines = ["| epsilon | LR synthetic | LR real | LR gap | GB synthetic | GB real | GB gap |"
             + (" std LR gap | std GB gap |" if std else ""),
             "|---|---|---|---|---|---|---|" + ("---|---|" if std else "")]
    for r in results:
        cells = [fmt(r[m][k]) for m in ("tfidf_logreg", "hgb_embeddings")
                 for k in ("synthetic", "real_sample", "gap")]
        if std:
            cells += [fmt(r[m]["gap"]) for m in ("onehot_logreg", "hgb_native")]
        lines.append(f"| {r['epsilon']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description="Adult TSTR AUC vs a real sample")
    ap.add_argument("--epsilons", default="1,2,4,inf")
    ap.add_argument("--quick", action="store_true", help="2,000 train / 1,000 test rows")
    args = ap.parse_args()
    r = run(parse_epsilons(args.epsilons), args.quick)
    print(json.dumps({k: v for k, v in r.items() if k != "table"}, indent=2))
    print(r["table"])





if __name__ == "__main__":
    enable_opendp()  # OpenDP's contrib features, once, at the command's entry
    main()
