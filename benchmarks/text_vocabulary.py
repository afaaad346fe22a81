"""The DP text vocabulary on the default model path: what it releases and what the text adds.

    python -m benchmarks.text_vocabulary [--quick] [--json FILE]

Demo rows (the generator, fictional; the bundled schema, ``chief_complaint`` maxLength 120 ->
keywords): ``--rows`` members (person unit as examples/release.toml), as many other rows as
test rows. Per release (counts only, ``fixed``, epsilon 2, the default ``phrase_share``; no
selection, so no LLM and no exemplars) with the vocabulary on and off, ``repeats`` times
(DP noise is never seeded): the vocabulary's size and coverage (share of member texts whose
topic is not "other" - a benchmark-only look at private data), the release's seconds; then
the model decoder writes as many rows as the members, scored against the test rows:

- text-only TSTR (TF-IDF + LR on the text alone, `audits.text_quality.text_tstr`) next to a
  real sample of the same size;
- record TSTR of the four evaluators (`audits.utility.run_utility`) with the text and with
  the text blanked on every side (the target: with text never worse than blanked);
- the share of synthetic texts that are released terms, and of exact copies of a member
  text that is not a released term (must be 0).

Reported: mean and range over the repeats (5; 3,000 members, 1,500 test rows). ``--quick``:
1,500 members, 600 test rows, 1 repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
TEXT = "chief_complaint"
EPSILON = 2.0


def _release(folder: Path, data: Path, key: Path, phrases: bool) -> tuple[dict, float, Path]:
    from release.config import load_config
    from release.pipeline import run_release
    from selpe_audit.schema import demo_schema_path

    out = folder / f"release-{'on' if phrases else 'off'}"
    cfg = load_config(ROOT / "examples" / "release.toml", {
        "data": data, "schema": demo_schema_path(), "release_key": key, "out": out,
        "lifetime_ledger": folder / "ledger", "dataset": f"text-vocab-{folder.name}-{phrases}",
        "enclave_log": folder / "enclave.log", "epsilon": EPSILON, "lifetime_epsilon": 1e6,
        "counts_mode": "fixed", "phrases": phrases, "cohorts": (), "rates": ()})
    t0 = time.perf_counter()
    doc = run_release(cfg).doc
    return doc, time.perf_counter() - t0, out


def _one(folder: Path, members: list[dict], test: list[dict], phrases: bool,
         seed: int) -> dict[str, Any]:
    import polars as pl

    from audits.text_quality import text_tstr
    from audits.utility import run_utility
    from decode.pipeline import DecodeSettings, run_decode
    from release.phrases import terms
    from selpe_audit.artifact.signing import generate_keypair
    from selpe_audit.schema import demo_schema_path, load_schema

    schema = load_schema(demo_schema_path())
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "members.csv"
    pl.DataFrame(members).write_csv(data)
    key, trust, _ = generate_keypair(folder / "k.pem")
    doc, seconds, out = _release(folder, data, key, phrases)
    syn_path = folder / "synthetic.csv"
    run_decode(out, [trust], 0, syn_path, DecodeSettings(n=len(members), decoder="model",
                                                          seed=seed))
    syn = pl.read_csv(syn_path, infer_schema=False).to_dicts()
    syn = [{f.name: _typed(f, r[f.name]) for f in schema.record_fields} for r in syn]
    topics = (doc["counts"].get("topics") or {}).get(TEXT)
    vocab = [p["text"] for p in topics["phrases"]["phrases"]] if topics else []
    kind = topics["phrases"]["kind"] if topics else "keywords"
    released = set(vocab)
    covered = sum(any(t in released for t in terms(r[TEXT], kind)) for r in members)
    member_texts = {r[TEXT] for r in members}
    syn_texts = [r[TEXT] for r in syn]
    blank = [{**r, TEXT: ""} for r in syn], [{**r, TEXT: ""} for r in members], \
        [{**r, TEXT: ""} for r in test]
    from selpe_audit.models import shared

    embedder = shared().embedder()
    with_text = run_utility(schema, syn, members, test, embedder, seed=seed)["models"]
    blanked = run_utility(schema, *blank, embedder, seed=seed)["models"]
    return {
        "vocabulary": len(vocab), "kind": kind, "coverage": covered / len(members),
        "release_s": round(seconds, 2),
        "text_tstr": text_tstr(schema, TEXT, syn, test, seed)["macro_auc"],
        "text_tstr_real": text_tstr(schema, TEXT, members, test, seed)["macro_auc"],
        "tstr_with_text": {m: v["synthetic"]["macro_auc"] for m, v in with_text.items()},
        "tstr_blanked": {m: v["synthetic"]["macro_auc"] for m, v in blanked.items()},
        "released_term_share": sum(t in released for t in syn_texts) / len(syn_texts),
        "private_copy_share": sum(t in member_texts and t not in released
                                  for t in syn_texts) / len(syn_texts),
        "distinct_share": len(set(syn_texts)) / len(syn_texts),
    }


def _typed(f: Any, v: str) -> Any:
    if f.kind == "numeric" or (f.kind == "categorical" and isinstance(f.enum[0], int)):
        return float(v) if f.kind == "numeric" else int(v)
    return v


def _stats(values: list[float]) -> dict[str, float]:
    return {"mean": round(statistics.fmean(values), 4), "min": round(min(values), 4),
            "max": round(max(values), 4)}


def run(quick: bool = False, rows: int | None = None, repeats: int | None = None) -> dict:
    from selpe_audit.demo.generator import generate_rows

    n = rows or (1_500 if quick else 3_000)
    n_test = 600 if quick else 1_500
    reps = repeats or (1 if quick else 5)
    members = generate_rows(n, seed=101)
    test = generate_rows(n_test, seed=202)
    out: dict[str, Any] = {"members": n, "test": n_test, "repeats": reps, "epsilon": EPSILON}
    with tempfile.TemporaryDirectory() as tmp:
        for phrases in (True, False):
            runs = [_one(Path(tmp) / f"{phrases}-{i}", members, test, phrases, i)
                    for i in range(reps)]
            name = "vocabulary on" if phrases else "vocabulary off"
            agg: dict[str, Any] = {k: _stats([r[k] for r in runs]) for k in (
                "vocabulary", "coverage", "release_s", "text_tstr", "text_tstr_real",
                "released_term_share", "private_copy_share", "distinct_share")}
            for part in ("tstr_with_text", "tstr_blanked"):
                agg[part] = {m: _stats([r[part][m] for r in runs]) for m in runs[0][part]}
            out[name] = agg
            print(f"{name}: {json.dumps(agg['text_tstr'])} text TSTR; "
                  f"vocabulary {agg['vocabulary']['mean']}", flush=True)
    out["table"] = _table(out)
    on = out["vocabulary on"]
    out["summary"] = (
        f"Default model path, demo rows ({n} members, epsilon {EPSILON:g}, {reps} releases): "
        f"the DP keyword vocabulary released {on['vocabulary']['mean']:g} terms covering "
        f"{on['coverage']['mean']:.0%} of member texts; text-only TSTR "
        f"{on['text_tstr']['mean']:.3f} against {on['text_tstr_real']['mean']:.3f} for real "
        f"text; exact copies of a private non-released text {on['private_copy_share']['max']:.0%}.")
    return out


def _table(out: dict[str, Any]) -> str:
    head = ("| vocabulary | terms | coverage | release s | text TSTR | real text | "
            "LR with text | LR blanked | GB with text | GB blanked | distinct | private copies |")
    lines = [head, "|" + "---|" * 12]
    for name in ("vocabulary on", "vocabulary off"):
        a = out[name]
        w, b = a["tstr_with_text"], a["tstr_blanked"]
        cells = [name.split()[-1], a["vocabulary"]["mean"], a["coverage"]["mean"],
                 a["release_s"]["mean"], a["text_tstr"]["mean"], a["text_tstr_real"]["mean"],
                 w["tfidf_logreg"]["mean"], b["tfidf_logreg"]["mean"],
                 w["hgb_embeddings"]["mean"], b["hgb_embeddings"]["mean"],
                 a["distinct_share"]["mean"], a["private_copy_share"]["max"]]
        lines.append("| " + " | ".join(f"{c:.3f}" if isinstance(c, float) else str(c)
                                       for c in cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rows", type=int)
    ap.add_argument("--repeats", type=int)
    ap.add_argument("--json")
    args = ap.parse_args()
    result = run(args.quick, args.rows, args.repeats)
    print(result["table"])
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
