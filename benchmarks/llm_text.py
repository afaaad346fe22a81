"""Does the LLM earn its place? Decoders side by side on Adult and the demo, epsilon 2.

    python -m benchmarks.llm_text [--quick] [--demo-n N] [--json FILE]

Adult (all 26,048 training rows, counts only in the default `fixed` mode, row unit): the
marginals, model and LLM decoders each decode as many rows as the training set from the same
artifact; TSTR gaps of all four evaluators (`audits.utility`) on the 6,513 test rows. Adult
has no free text, so the LLM decoder's records are the model decoder's (hybrid decoding: the
fields come from the released model, the LLM writes only free text) - the target is a gap
within 0.01 of the model decoder's.

Demo (the bundled 400-row sample as members, 400 fictional rows of another seed as
non-members and test rows), two artifacts:

- ``default path``: ``selpe-audit release --data --schema --counts-share 0.5`` with nothing
  else (the release's default spends no epsilon on selection; this benchmark is about the
  exemplars, so half goes there) - counts in the
  `fixed` mode and SelPE selection over LLM candidates (no public pool, so no topics): the
  LLM writes the candidates' free text, their fields come from the counts released in the
  same run. Reported: the release's time, its candidates' text counters, and whether the
  released winners' texts are varied, non-placeholder and their vitals off the schema's
  bounds. Decoded by the marginals, model and LLM (hybrid) decoders.
- ``default path, schema without examples``: the same release from the demo schema less
  its ``chief_complaint`` examples (public example texts the LLM is shown where a text has
  no topic), decoded by the LLM: what the examples add.
- ``pool``: the `selpe-audit demo --selection` release (person unit, topic codebooks of 8
  anchors per free-text field from a public pool of fictional rows, selection over that
  pool at half of epsilon). Decoded
  by the model decoder (its texts are the topics' public anchor texts), the LLM decoder
  (anchors + the class's DP-selected exemplars in the prompt) and the LLM decoder without
  exemplars (anchors alone): do the exemplars help?
- ``upper bound, not DP``: the default-path artifact decoded with 3 real member rows per
  class as the LLM's exemplars in place of the DP-selected ones (a benchmark-only view, never
  a release): how much label signal the bundled LLM carries into its texts when its prompt
  holds real texts of the class.

Each demo decode writes ``--demo-n`` rows (over-generation 2, SelectTop and the fit, as
`decode` runs by default) and is scored by `benchmarks.triage.audit` (strict validity, TVD,
TSTR, MIA TPR at 1 % FPR next to the DP bound) and `audits.text_quality` (text-only TSTR of
the free text next to a same-size real sample, near-copies of private texts, distinct texts),
plus the count of placeholder texts in the output (`selpe_audit.llm.text.placeholder_words`).
Targets (the LLM-text issue): Adult gap within 0.01 of the model decoder's; on the default
path at least 90 % distinct texts, 0 placeholders, text-only TSTR within 0.05 of real text's,
100 % strict validity and MIA under the bound.

``--quick``: Adult's 2,000/1,000-row split decoded by the model and LLM decoders, 100
members, 4 rows per decode, the default path decoded by the LLM only (no ``schema without
examples`` release, no pool release: its rows are the full run's).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np

from benchmarks.adult import release_settings, split_paths
from benchmarks.counts_modes import release_child
from benchmarks.triage import Bench, Sizes, audit, make_bench
from decode.pipeline import DecodeSettings
from decode.released import Released, released_view
from release.dp import enable as enable_opendp
from selpe_audit.artifact.document import read_release
from selpe_audit.llm.text import placeholder_words

ROOT = Path(__file__).resolve().parents[1]
EPSILON = 2.0
#: half of epsilon on selection: the exemplars this benchmark is about (the release's
#: default spends none there)
SELECTION = {"counts_share": 0.5, "selection_share": 0.5}
TEXT = "chief_complaint"
Row = dict[str, Any]


@dataclass(frozen=True)
class TextPlan:
    quick: bool
    members: int
    demo_n: int     # rows per demo decode (LLM and not)
    pool: int
    no_examples: bool = True  # the default path again from a schema without text examples
    pool_release: bool = True  # a release with the public pool's candidates and anchors
    #: the decoders of the Adult and the demo default-path rows (the claims compare the LLM
    #: decoder with the model decoder on Adult, and check the LLM's rows on the demo)
    decoders: tuple[str, ...] = ("marginals", "model", "llm")
    demo_decoders: tuple[str, ...] = ("marginals", "model", "llm")


FULL = TextPlan(False, members=400, demo_n=100, pool=600)
# 100 non-members: TPR at 1 % FPR; the smoke run releases on the default path only
QUICK = TextPlan(True, members=100, demo_n=4, pool=120, no_examples=False, pool_release=False,
                 decoders=("model", "llm"), demo_decoders=("llm",))


# ----- Adult ---------------------------------------------------------------------------------

def adult(plan: TextPlan, folder: Path) -> dict[str, Any]:
    """One fixed-mode release; the three decoders at N = the training rows; TSTR gaps."""
    from audits.utility import run_utility
    from benchmarks.counts_modes import decode
    from release.private_data import read_private_rows
    from selpe_audit.artifact.signing import generate_keypair
    from selpe_audit.schema import load_schema

    folder.mkdir(parents=True, exist_ok=True)
    key, trust, _ = generate_keypair(folder / "adult.pem")
    train_path, test_path, schema_path = split_paths(plan.quick)
    schema = load_schema(schema_path)
    real_train = read_private_rows(train_path, schema).priv_rows
    real_test = read_private_rows(test_path, schema).priv_rows
    settings = release_settings(train_path, schema_path, EPSILON, folder, key, "fixed")
    rel = release_child(settings)
    rows = []
    for decoder in plan.decoders:
        out = folder / f"adult-{decoder}.parquet"
        seconds = decode(settings["out"], trust, out, len(real_train), decoder)
        util = run_utility(schema, read_private_rows(out, schema).priv_rows, real_train,
                           real_test, None, seed=0)
        rows.append({"decoder": decoder, "decode_s": round(seconds, 1),
                     "gaps": {m: v["gap"] for m, v in util["models"].items()},
                     "synthetic": {m: v["synthetic"]["macro_auc"]
                                   for m, v in util["models"].items()}})
        print(f"adult {decoder}: {rows[-1]['gaps']}", flush=True)
    by = {r["decoder"]: r for r in rows}
    diff = max(abs(by["llm"]["gaps"][m] - by["model"]["gaps"][m]) for m in by["llm"]["gaps"])
    return {"train_rows": len(real_train), "test_rows": len(real_test), "epsilon": EPSILON,
            "release_s": rel["seconds"], "rows": rows, "llm_vs_model_max_gap_diff": diff,
            "target_met": diff <= 0.01}


# ----- demo ----------------------------------------------------------------------------------

def _release(b: Bench, name: str, config: Path | None, **overrides: Any) -> tuple[Released,
                                                                                   dict]:
    """One demo release in this process (its models shared); its view, its
    document and its wall time."""
    from release.config_file import load_config
    from release.installation import Installation
    from release.pipeline import run_release

    settings = {"data": b.data, "schema": ROOT / "selpe_audit/data/ed_triage.schema.json",
                "dataset": f"llm-text-{name}", "release_key": b.key, "out": b.folder / name,
                "epsilon": EPSILON, "lifetime_epsilon": 100.0,
                "lifetime_ledger": b.folder / "ledger" / name,
                "enclave_log": b.folder / f"{name}.log", **overrides}
    cfg = load_config(config, settings)
    t0 = time.perf_counter()
    experiments = Installation.for_experiments("benchmark")  # many releases, public data
    doc = run_release(cfg, installation=experiments).doc  # the process's models, as the audits
    doc["_seconds"] = round(time.perf_counter() - t0, 1)
    return released_view(read_release(cfg.out, [b.trust])), doc


def _without_examples(b: Bench) -> Path:
    """The demo schema without its free-text ``examples``: what the schema's public example
    texts add on the default path (release candidates and decode prompts)."""
    raw = json.loads((ROOT / "selpe_audit/data/ed_triage.schema.json").read_text())
    for spec in raw["properties"].values():
        spec.pop("examples", None)
    path = b.folder / "ed_triage.no-examples.schema.json"
    path.write_text(json.dumps(raw, indent=2))
    return path


REAL_SHOWN = "upper bound, not DP: llm shown real rows"
REAL_EXEMPLARS = 3  # real member rows per class in REAL_SHOWN's prompts


def _real_exemplars(b: Bench, released: Released) -> Released:
    """A view of ``released`` whose exemplars are `REAL_EXEMPLARS` private member rows per
    class (seeded): NOT a release, a benchmark-only upper bound on what the decoder's prompt
    can carry - how much of real text's label signal the LLM passes on when it is shown
    real texts of the class instead of DP-selected ones."""
    rng = np.random.default_rng(0)
    label = b.schema.label
    shown = {}
    for c in released.classes:
        rows = [r for r in b.members if r[label] == c]
        pick = rng.choice(len(rows), size=min(REAL_EXEMPLARS, len(rows)), replace=False)
        shown[c] = [rows[int(i)] for i in pick]
    return replace(released, winners=shown, partners={c: [] for c in released.classes})


def _at_bounds(b: Bench, records: Sequence[Row]) -> float:
    """Share of numeric values equal to their field's schema minimum or maximum."""
    vals = [(r[f.name], f) for r in records for f in b.schema.record_fields
            if f.kind == "numeric" and r.get(f.name) is not None]
    return sum(v in (f.minimum, f.maximum) for v, f in vals) / max(1, len(vals))


def winners_check(b: Bench, released: Released, doc: dict[str, Any]) -> dict[str, Any]:
    """The released exemplars on the default path: varied text, no placeholder, vitals off
    the schema's bounds (numbers only: the exemplars are public, synthetic)."""
    ex = [r for c in released.classes for r in (*released.winners[c], *released.partners[c])]
    texts = [r[TEXT] for r in ex]
    words = placeholder_words(b.schema)
    cand = (doc.get("selection") or {}).get("candidates") or {}
    return {"exemplars": len(ex), "distinct_texts": len(set(texts)),
            "placeholders": sum(_norm(t) in words for t in texts),
            "share_at_bounds": _at_bounds(b, ex),
            "members_share_at_bounds": _at_bounds(b, b.members),  # real vitals hit them too
            "candidate_text": cand.get("text"),
            "release_s": doc["_seconds"]}


def _norm(text: str) -> str:
    """`placeholder_words`' normal form: lower-case words only."""
    return " ".join(re.sub(r"[^0-9a-z]+", " ", text.lower()).split())


def score(b: Bench, name: str, released: Released, settings: DecodeSettings,
          prompt_view: Released | None = None) -> dict[str, Any]:
    """Decode (candidates from ``prompt_view``, default ``released``; the select step on
    ``released``), then audit the rows and their free text."""
    from audits.text_quality import text_quality

    cand = b.dec.generate(prompt_view or released, settings)
    records, _ = b.dec.choose(released, cand, settings)
    texts = [r[TEXT] for r in records]
    words = placeholder_words(b.schema)
    tq = text_quality(b.schema, records, b.members, b.non_members, seed=0)[TEXT]
    out = {"config": name, "decoder": settings.decoder, "rows": len(records),
           "generation_seconds": round(cand.seconds, 1),
           "candidates_per_s": round(cand.count / cand.seconds, 3) if cand.seconds else None,
           "llm": cand.llm_stats,
           "placeholders": sum(_norm(t) in words for t in texts),
           "distinct_share": len(set(texts)) / max(1, len(texts)),
           "text_tstr": {"synthetic": tq["tstr"]["synthetic"]["macro_auc"],
                         "real_sample": tq["tstr"]["real_sample"]["macro_auc"],
                         "gap": tq["tstr"]["gap"]},
           "near_copies": tq["near_copies"], "diversity": tq["diversity"],
           **audit(b, name, records, EPSILON)}
    print(_line(out), flush=True)
    return out


def demo(plan: TextPlan, folder: Path) -> dict[str, Any]:
    sizes = Sizes((EPSILON,), members=plan.members, n=plan.demo_n, llm_n=plan.demo_n,
                  pool=plan.pool, rounds=1, k=3)
    folder.mkdir(parents=True, exist_ok=True)
    b = make_bench(folder, sizes)
    n = plan.demo_n
    default, d_doc = _release(b, "default-path", None, **SELECTION)
    rows = [score(b, f"default path: {d}", default, DecodeSettings(n=n, decoder=d))
            for d in plan.demo_decoders]
    if plan.no_examples:
        bare, _ = _release(b, "default-path-no-examples", None, schema=_without_examples(b),
                           **SELECTION)
        rows.append(score(b, "default path, schema without examples: llm", bare,
                          DecodeSettings(n=n, decoder="llm")))
    pool_s = None
    if plan.pool_release:
        pool_rel, p_doc = _release(b, "pool", ROOT / "selpe_audit/data/demo_release.toml",
                                   candidates=b.pool, **SELECTION)
        pool_s = p_doc["_seconds"]
        no_exemplars = replace(pool_rel, winners={c: [] for c in pool_rel.classes},
                               partners={c: [] for c in pool_rel.classes})
        rows += [score(b, "pool: model (anchor texts)", pool_rel,
                       DecodeSettings(n=n, decoder="model")),
                 score(b, "pool: llm (exemplars + anchors)", pool_rel,
                       DecodeSettings(n=n, decoder="llm")),
                 score(b, "pool: llm (anchors only)", pool_rel,
                       DecodeSettings(n=n, decoder="llm"), prompt_view=no_exemplars)]
    rows.append(score(b, REAL_SHOWN, default, DecodeSettings(n=n, decoder="llm"),
                      prompt_view=_real_exemplars(b, default)))
    llm = next(r for r in rows if r["config"] == "default path: llm")
    tstr_gap = llm["text_tstr"]["gap"]
    bound = llm["mia_tpr_bound_at_1pct"]
    checks = {"distinct_share>=0.9": llm["distinct_share"] >= 0.9,
              "placeholders==0": llm["placeholders"] == 0,
              "text_tstr_gap<=0.05": tstr_gap is not None and tstr_gap <= 0.05,
              "strict_validity==1": llm["validity_strict"] == 1.0,
              "mia_under_bound": all(v["tpr_at_1pct_fpr"] <= bound
                                     for v in llm["mia"].values())}
    return {"members": len(b.members), "n": n, "epsilon": EPSILON,
            "default_path_release": winners_check(b, default, d_doc),
            "pool_release_s": pool_s, "rows": rows,
            "default_path_targets": checks}


def _line(r: dict[str, Any]) -> str:
    t = r["text_tstr"]
    return (f"{r['config']}: {r['rows']} rows, text TSTR {t['synthetic']} vs real "
            f"{t['real_sample']}, distinct {r['distinct_share']:.2f}, placeholders "
            f"{r['placeholders']}, valid {r['validity_strict']}, "
            f"{r['candidates_per_s']} candidates/s")


def run(quick: bool = False, demo_n: int | None = None) -> dict[str, Any]:
    plan = QUICK if quick else FULL
    if demo_n is not None:
        plan = replace(plan, demo_n=demo_n)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-llm-text-") as tmp:
        folder = Path(tmp)
        result = {"adult": adult(plan, folder / "adult"), "demo": demo(plan, folder / "demo")}
    result["seconds"] = round(time.perf_counter() - t0, 1)
    from benchmarks.report import SUMMARIES

    result["summary"] = SUMMARIES["llm_text"](result)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="decoders side by side: does the LLM help?")
    ap.add_argument("--quick", action="store_true", help="small sizes (CI smoke run)")
    ap.add_argument("--demo-n", type=int, help="rows per demo decode (default 100)")
    ap.add_argument("--json", help="write the full result here")
    args = ap.parse_args(argv)
    r = run(args.quick, args.demo_n)
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=2, default=str))
    print(r["summary"])
    return 0


if __name__ == "__main__":
    enable_opendp()  # OpenDP's contrib features, once, at the command's entry
    raise SystemExit(main())
