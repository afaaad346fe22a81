"""UCI Adult with the LLM decoder on a subsample: train on synthetic, test on real.

    python -m benchmarks.adult_llm [--n 100] [--epsilons 1,2,4,inf] [--overgenerate 2]
                                   [--single-stage] [--quick]

The release is `benchmarks.adult_tstr`'s (counts only, row unit, all 26,048 training rows;
"inf" = epsilon 1e6, as there). From each artifact the LLM decoder (default model, two-stage
generation under the schema's grammar) makes ``overgenerate x N`` candidates and the select
step fits N of them to the released counts (SelectTop is skipped: a counts-only artifact
has no winners; the prompt holds the field guide and the per-class hints). Beside it, from
the same artifact: the marginals decoder with the same select step at the same N, and a
real sample of N training rows. Each is scored by macro ROC AUC of logistic regression
(TF-IDF of the record) and gradient boosting on the 6,513 real test rows.

N is small because the model makes 0.1-1.3 records per second on 2 shared CPU cores (it
varies with the load); the result records the generation time of each decode. At N = 100
the AUCs carry sampling noise of a few hundredths (the real-sample column shows how much a
sample that small loses).
``--quick``: 2,000 train / 1,000 test rows, epsilon 2, N = 4.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from audits.utility import run_utility
from benchmarks.adult import INF, counts_release, fmt, label, parse_epsilons, split_paths
from benchmarks.local_decode import LocalDecode
from decode.pipeline import DecodeSettings
from decode.released import Released, released_view
from release.dp import enable as enable_opendp
from release.private_data import read_private_rows
from selpe_audit.artifact.document import read_release
from selpe_audit.artifact.signing import generate_keypair
from selpe_audit.schema import load_schema

Row = dict[str, Any]
N = 100  # LLM rows per epsilon (2N candidates): 5-15 minutes in all at 0.5-1.2 records/s


def _decode(dec: LocalDecode, released: Released,
            settings: DecodeSettings) -> tuple[list[Row], dict[str, Any]]:
    """Candidates, then the select step; the rows and how they were made."""
    cand = dec.generate(released, settings)
    rows, notes = dec.choose(released, cand, settings)
    info = {"rows": len(rows), "candidates": cand.count,
            "generation_seconds": round(cand.seconds, 1),
            "records_per_s": round(cand.count / cand.seconds, 3) if cand.seconds else None,
            "generation_validity": cand.validity, "select_top": notes["select_top"],
            "fit": notes["fit"]["applied"]}
    return rows, info


def _auc(u: dict[str, Any], which: str) -> dict[str, float | None]:
    return {m: v[which]["macro_auc"] for m, v in u["models"].items()}


def run(epsilons: list[float], n: int = N, overgenerate: float = 2.0,
        quick: bool = False, two_stage: bool = True) -> dict[str, Any]:
    """Per epsilon: release, LLM and marginals decodes of N rows, TSTR next to real."""
    train_path, test_path, schema_path = split_paths(quick)
    schema = load_schema(schema_path)
    real_train = read_private_rows(train_path, schema).priv_rows
    real_test = read_private_rows(test_path, schema).priv_rows
    results = []
    dec = LocalDecode()  # one model for every epsilon: its cached prompt prefixes carry over
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        priv, pub, _ = generate_keypair(t / "release.pem")
        for eps in epsilons:
            artifact = counts_release(train_path, schema_path, eps, t, priv, "marginals")
            released = released_view(read_release(artifact, [pub]))
            row: dict[str, Any] = {"epsilon": label(eps)}
            for name in ("llm", "marginals"):
                syn, info = _decode(dec, released, DecodeSettings(
                    n=n, decoder=name, seed=0, overgenerate=overgenerate, two_stage=two_stage))
                u = run_utility(schema, syn, real_train, real_test, None, seed=0)
                row[name] = {**info, "auc": _auc(u, "synthetic")}
                row["real_sample"] = {"rows": u["sizes"]["real_sample"],
                                      "auc": _auc(u, "real_sample")}
            row["llm_gap"] = {m: _gap(row["real_sample"]["auc"][m], row["llm"]["auc"][m])
                              for m in row["llm"]["auc"]}
            results.append(row)
            _print(row)
    return {"train_rows": len(real_train), "test_rows": len(real_test), "n": n,
            "overgenerate": overgenerate, "two_stage": two_stage, "epsilon_inf_means": INF,
            "release": "counts only (row unit), as benchmarks.adult_tstr",
            "select_step": "CoRTeC-style fit (SelectTop skipped: no winners in the artifact)",
            "models": {"tfidf_logreg": "TF-IDF of the record + logistic regression",
                       "hgb_embeddings": "gradient boosting on numeric + one-hot fields"},
            "results": results, "seconds": round(time.perf_counter() - t_all, 1),
            "table": table(results)}


def table(results: list[dict[str, Any]]) -> str:
    """Markdown: TSTR AUC of the LLM and marginals decoders at N rows next to a real sample
    of N rows, and the LLM's gap."""
    lines = ["| epsilon | model | LLM | marginals | real sample | LLM gap | LLM records/s |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        for m in r["llm"]["auc"]:
            lines.append(f"| {r['epsilon']} | {m} | {fmt(r['llm']['auc'][m])} | "
                         f"{fmt(r['marginals']['auc'][m])} | {fmt(r['real_sample']['auc'][m])} "
                         f"| {fmt(r['llm_gap'][m])} | {r['llm']['records_per_s']} |")
    return "\n".join(lines)


def _gap(real: float | None, syn: float | None) -> float | None:
    return None if real is None or syn is None else real - syn


def _print(row: dict[str, Any]) -> None:
    llm = row["llm"]
    print(f"eps={row['epsilon']}: LLM {llm['rows']} rows from {llm['candidates']} candidates "
          f"in {llm['generation_seconds']:.0f} s ({llm['records_per_s']} records/s)", flush=True)
    for m in row["llm"]["auc"]:
        print(f"  {m}: LLM {fmt(row['llm']['auc'][m])}, marginals "
              f"{fmt(row['marginals']['auc'][m])}, real sample "
              f"{fmt(row['real_sample']['auc'][m])} (LLM gap {fmt(row['llm_gap'][m])})",
              flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.adult_llm", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epsilons", default="1,2,4,inf")
    ap.add_argument("--n", type=int, default=N, help="synthetic rows per decoder and epsilon")
    ap.add_argument("--overgenerate", type=float, default=2.0)
    ap.add_argument("--single-stage", action="store_true",
                    help="LLM without the Stage I latent context (faster)")
    ap.add_argument("--quick", action="store_true", help="2,000 / 1,000 rows, eps 2, N = 4")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args(argv)
    eps = parse_epsilons(args.epsilons)
    if args.quick:
        eps, args.n = [2.0], min(args.n, 4)
    r = run(eps, args.n, args.overgenerate, args.quick, not args.single_stage)
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    enable_opendp()  # OpenDP's contrib features, once, at the command's entry
    raise SystemExit(main())
