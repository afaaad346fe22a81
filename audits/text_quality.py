"""Text quality of the synthetic free-text fields (part of the utility audit).

For each field of kind "text", three measurements, reported as numbers only (never a text:
the report may leave the enclave, and a quoted private value would leak it):

- ``tstr``: TF-IDF + logistic regression on that field's text alone (the utility audit's
  settings), predicting the label; trained on the synthetic texts, on a same-size seeded
  real sample and on any extra labelled sets (e.g. public topic anchors), each scored by
  macro one-vs-rest ROC AUC on the real test rows - does the text carry the label?
- ``near_copies``: the share of synthetic texts whose nearest real training text has a
  character n-gram TF-IDF cosine at or above a threshold (exact copies always count), the
  share near a public reference set when one is given, and the share near a private text
  but near no public text - the near-copies public texts do not explain. The share of real
  test texts near a real training text is the baseline: how often real texts repeat anyway.
- ``diversity``: distinct-1/-2 (distinct word uni/bigrams over all of them), the share of
  distinct texts and self-similarity (mean pairwise char n-gram cosine over a seeded
  sample), for the synthetic texts and the same-size real sample (distinct-n falls with
  corpus size, so only a same-size comparison means anything).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table
from scipy import sparse
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression

from audits.scoring import TOKEN_PATTERN, fit_predict, macro_ovr_auc
from selpe_audit.schema import Schema

NEAR_COPY_THRESHOLD = 0.9
SELF_SIMILARITY_SAMPLE = 500
_CELLS = 4_000_000  # similarity block size (float64: ~32 MB)

Row = dict[str, Any]
#: Public reference texts: one list for every text field, or a list per field name.
PublicTexts = Sequence[str] | Mapping[str, Sequence[str]]


def _texts(rows: Sequence[Row], name: str) -> list[str]:
    return ["" if r.get(name) is None else str(r[name]) for r in rows]


def _char_vectorizer() -> TfidfVectorizer:
    return TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5))


def text_tstr(schema: Schema, name: str, train: Sequence[Row], test: Sequence[Row],
              seed: int) -> dict[str, Any]:
    """One field's text alone -> label (TF-IDF word 1-2 grams + LR, as ``tfidf_logreg``)."""
    y_train = np.array([r[schema.label] for r in train])
    y_test = np.array([r[schema.label] for r in test])
    vec = TfidfVectorizer(token_pattern=TOKEN_PATTERN, ngram_range=(1, 2), sublinear_tf=True)
    try:
        x_tr = vec.fit_transform(_texts(train, name))
    except ValueError:  # no words at all (empty texts or no rows): nothing to learn
        return {"n": len(train), **macro_ovr_auc(y_test, None, [], schema.classes)}
    lr = LogisticRegression(max_iter=2000, random_state=seed)
    proba, cls = fit_predict(lr, x_tr, y_train, vec.transform(_texts(test, name)))
    return {"n": len(train), **macro_ovr_auc(y_test, proba, cls, schema.classes)}


def nearest_similarity(texts: Sequence[str], refs: Sequence[str],
                       vec: TfidfVectorizer | None) -> np.ndarray:
    """Each text's highest char n-gram cosine to any reference text; 1.0 for an exact copy
    (so that copies of an empty or n-gram-less text count too; ``vec`` None: copies only)."""
    out = np.zeros(len(texts))
    if not texts or not refs:
        return out
    refset = set(refs)
    out[[t in refset for t in texts]] = 1.0
    if vec is None:
        return out
    a, b = vec.transform(texts), vec.transform(refs).T.tocsr()  # rows are L2-normalised
    step = max(1, _CELLS // len(refs))
    for start in range(0, len(texts), step):
        block = sparse.csr_matrix(a[start:start + step] @ b).toarray()
        part = out[start:start + block.shape[0]]
        np.maximum(part, block.max(axis=1), out=part)
    return np.clip(out, 0.0, 1.0)


def _share(flags: np.ndarray) -> dict[str, Any]:
    n = int(flags.sum())
    return {"count": n, "share": n / len(flags) if len(flags) else None}


def near_copies(syn: Sequence[str], private: Sequence[str], test: Sequence[str],
                public: Sequence[str] | None, threshold: float) -> dict[str, Any]:
    """Counts and shares of synthetic texts near a private text, near a public one, near a
    private but no public text, and near a private but no public and no held-out real
    (``test``) text - what a coincidence of common phrasing, which non-members write too,
    cannot explain; real test texts near a training text as baseline."""
    vec: TfidfVectorizer | None = _char_vectorizer()
    try:
        vec.fit([*syn, *private, *test, *(public or [])])
    except ValueError:  # not one character n-gram anywhere: only exact copies can match
        vec = None
    near_private = nearest_similarity(syn, private, vec) >= threshold
    private_set = set(private)
    out: dict[str, Any] = {
        "threshold": threshold, "n_synthetic": len(syn),
        "exact_private": _share(np.array([t in private_set for t in syn], dtype=bool)),
        "near_private": _share(near_private),
        "real_test_near_private": _share(nearest_similarity(test, private, vec) >= threshold),
    }
    beyond = near_private & ~(nearest_similarity(syn, test, vec) >= threshold)
    if public is not None:
        near_public = nearest_similarity(syn, public, vec) >= threshold
        out["n_public"] = len(public)
        out["near_public"] = _share(near_public)
        out["near_private_beyond_public"] = _share(near_private & ~near_public)
        beyond &= ~near_public
    out["near_private_beyond_test"] = _share(beyond)
    return out


def _distinct_n(texts: Sequence[str], n: int) -> float | None:
    grams: list[tuple[str, ...]] = []
    for t in texts:
        words = re.findall(TOKEN_PATTERN, t.lower())
        grams.extend(zip(*(words[i:] for i in range(n)), strict=False))
    return len(set(grams)) / len(grams) if grams else None


def self_similarity(texts: Sequence[str], seed: int,
                    cap: int = SELF_SIMILARITY_SAMPLE) -> float | None:
    """Mean pairwise char n-gram cosine over a seeded sample of at most ``cap`` texts."""
    if len(texts) < 2:
        return None
    if len(texts) > cap:
        idx = np.random.default_rng(seed).choice(len(texts), size=cap, replace=False)
        texts = [texts[i] for i in np.sort(idx)]
    try:
        x = _char_vectorizer().fit_transform(texts)
    except ValueError:  # no n-grams: all texts are tiny; identical or not, by string
        return float(len(set(texts)) == 1)
    sim = (x @ x.T).toarray()
    n = len(texts)
    return float((sim.sum() - np.trace(sim)) / (n * (n - 1)))


def diversity(texts: Sequence[str], seed: int) -> dict[str, Any]:
    return {"n": len(texts), "distinct_1": _distinct_n(texts, 1),
            "distinct_2": _distinct_n(texts, 2),
            "distinct_texts": len(set(texts)) / len(texts) if texts else None,
            "self_similarity": self_similarity(texts, seed)}


def text_quality(schema: Schema, syn: Sequence[Row], real_train: Sequence[Row],
                 real_test: Sequence[Row], public: PublicTexts | None = None, seed: int = 0,
                 extra: Mapping[str, Sequence[Row]] | None = None,
                 threshold: float = NEAR_COPY_THRESHOLD) -> dict[str, Any]:
    """Per text field: text-only TSTR, near-copies and diversity (numbers only).

    ``public``: public reference texts (e.g. pool or anchor texts) for the near-copy
    comparison. ``extra``: named labelled sets (rows with the label and the text field, e.g.
    topic anchors) trained on like the synthetic set, for a side-by-side TSTR."""
    n = min(len(syn), len(real_train))
    idx = np.sort(np.random.default_rng(seed).choice(len(real_train), size=n, replace=False))
    sample = [real_train[i] for i in idx]  # the same sample as run_utility's baseline
    out: dict[str, Any] = {}
    for f in schema.by_kind("text"):
        on_syn = text_tstr(schema, f.name, syn, real_test, seed)
        on_real = text_tstr(schema, f.name, sample, real_test, seed)
        s, r = on_syn["macro_auc"], on_real["macro_auc"]
        tstr = {"synthetic": on_syn, "real_sample": on_real,
                "gap": None if s is None or r is None else r - s,
                "extra": {k: text_tstr(schema, f.name, [x for x in rows if f.name in x],
                                       real_test, seed)
                          for k, rows in (extra or {}).items()}}
        pub = public.get(f.name) if isinstance(public, Mapping) else public
        syn_texts = _texts(syn, f.name)
        out[f.name] = {
            "tstr": tstr,
            "near_copies": near_copies(syn_texts, _texts(real_train, f.name),
                                       _texts(real_test, f.name),
                                       None if pub is None else list(pub), threshold),
            "diversity": {"synthetic": diversity(syn_texts, seed),
                          "real_sample": diversity(_texts(sample, f.name), seed)},
        }
    return out


def render(text: dict[str, Any], console: Console) -> None:
    """One table: per text field, synthetic vs. real sample (``syn / real``)."""
    def fmt(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    def pct(s: dict[str, Any] | None) -> str:
        return "-" if s is None or s["share"] is None else f"{100 * s['share']:.1f} %"

    t = Table(title="free text: synthetic / real sample",
              caption="TSTR on the text alone (macro OvR ROC AUC); near-copies: char n-gram "
                      "cosine to a private text >= threshold (real test texts: baseline)")
    for col in ("field", "text TSTR", "extra TSTR", "near-copies", "beyond public",
                "beyond public and test", "real baseline", "distinct-1", "distinct-2",
                "distinct texts", "self-sim"):
        t.add_column(col)
    for name, q in text.items():
        tstr, near, div = q["tstr"], q["near_copies"], q["diversity"]
        pair = {k: " / ".join(fmt(div[s][k]) for s in ("synthetic", "real_sample"))
                for k in ("distinct_1", "distinct_2", "distinct_texts", "self_similarity")}
        extra = ", ".join(f"{k} {fmt(v['macro_auc'])}" for k, v in tstr["extra"].items())
        t.add_row(name, f"{fmt(tstr['synthetic']['macro_auc'])} / "
                        f"{fmt(tstr['real_sample']['macro_auc'])}", extra or "-",
                  pct(near["near_private"]), pct(near.get("near_private_beyond_public")),
                  pct(near["near_private_beyond_test"]), pct(near["real_test_near_private"]),
                  *pair.values())
    console.print(t)
