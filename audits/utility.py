"""Utility: train on synthetic, test on real (TSTR), next to train-on-real of the same size.

Four models predict the label, scored by macro one-vs-rest ROC AUC on the real test rows.
This project's own evaluator:

- ``tfidf_logreg``: TF-IDF of the linearised record *without the label field* + logistic
  regression (the label must not be in its own input text);
- ``hgb_embeddings``: scikit-learn's HistGradientBoostingClassifier on numeric fields,
  one-hot categorical fields (categories from the public schema) and sentence embeddings
  (`selpe_audit.kernel.embeddings`) of each free-text field.

The standard tabular evaluator (what TSTR papers on Adult report; free-text fields ignored):

- ``onehot_logreg``: one-hot categorical fields (public categories) and standardised
  numeric fields, logistic regression;
- ``hgb_native``: HistGradientBoostingClassifier on the numeric fields and the categorical
  fields as native categorical features (public category codes).

The baseline trains the same models on a seeded sample of the real training rows with as
many rows as the synthetic set. A schema with free-text fields also gets a text-quality
report per field (`audits.text_quality`): text-only TSTR, the share of synthetic texts that
are near-copies of a real training text, and diversity - counts and shares, never a text.
Everything is seeded (sampling, models); no DP noise is involved, so a rerun with the same
--seed gives the same numbers.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from audits import text_quality
from audits.io import load_embedder, load_record_schema
from audits.kinds import AuditKind, common_arguments, finish, make_report, read_rows, register
from audits.scoring import TOKEN_PATTERN, fit_predict, macro_ovr_auc
from selpe_audit.kernel.private_text import TextEncoder
from selpe_audit.schema import Schema

#: This project's evaluator first, then the standard tabular one (``STANDARD``).
MODELS = ("tfidf_logreg", "hgb_embeddings", "onehot_logreg", "hgb_native")
STANDARD = ("onehot_logreg", "hgb_native")
#: Below this many training cells, gradient boosting runs on one OpenMP thread: on a shared or
#: oversubscribed CPU, OpenMP's spin-waiting made a 150 x 405 fit 12x slower with 2 threads
#: (61 s vs 5 s, measured), and small fits gain nothing from threads anyway.
SINGLE_THREAD_CELLS = 5_000_000

Row = dict[str, Any]


def text_without_label(schema: Schema, r: Row) -> str:
    """The linearised record with the label field left out."""
    return "; ".join(schema.lexicalize(f.name, r[f.name]) for f in schema.record_fields
                     if f.name != schema.label)


def tabular_features(schema: Schema, rows: Sequence[Row],
                     embedder: TextEncoder | None) -> np.ndarray:
    """Numeric values, one-hot public categories, and text embeddings (label excluded)."""
    blocks: list[np.ndarray] = []
    for f in schema.record_fields:
        if f.name == schema.label:
            continue
        if f.kind == "numeric":
            blocks.append(np.array([[float(r[f.name])] for r in rows]))
        elif f.kind == "categorical":
            index = {v: i for i, v in enumerate(f.enum)}
            onehot = np.zeros((len(rows), len(f.enum)))
            onehot[np.arange(len(rows)), [index[r[f.name]] for r in rows]] = 1.0
            blocks.append(onehot)
        else:
            if embedder is None:
                raise ValueError("text fields need an embedder")
            texts = [schema.lexicalize(f.name, r[f.name]) for r in rows]
            blocks.append(np.asarray(embedder.encode(texts), dtype=np.float64))
    return np.hstack(blocks)


def _public_codes(f: Any, rows: Sequence[Row]) -> np.ndarray:
    """Each row's index into the field's public categories; NaN for a value outside them."""
    index = {v: i for i, v in enumerate(f.enum)}
    return np.array([index.get(r[f.name], np.nan) for r in rows], dtype=np.float64)


def standard_features(schema: Schema, rows: Sequence[Row]) -> tuple[np.ndarray, np.ndarray,
                                                                    list[int]]:
    """(numeric block, categorical codes, category counts), label and free text left out."""
    num = schema.by_kind("numeric")
    cat = [f for f in schema.by_kind("categorical") if f.name != schema.label]
    x_num = np.array([[float(r[f.name]) for f in num] for r in rows],
                     dtype=np.float64).reshape(len(rows), len(num))
    x_cat = (np.column_stack([_public_codes(f, rows) for f in cat]) if cat
             else np.zeros((len(rows), 0)))
    return x_num, x_cat, [len(f.enum) for f in cat]


def _onehot(codes: np.ndarray, sizes: list[int]) -> np.ndarray:
    """One column per public category; a value outside them is all zeros."""
    blocks = []
    for j, k in enumerate(sizes):
        block = np.zeros((len(codes), k))
        ok = ~np.isnan(codes[:, j])
        block[np.flatnonzero(ok), codes[ok, j].astype(int)] = 1.0
        blocks.append(block)
    return np.hstack(blocks) if blocks else np.zeros((len(codes), 0))


def evaluate_standard(schema: Schema, train: Sequence[Row], test: Sequence[Row],
                      seed: int) -> dict[str, Any]:
    """The standard tabular evaluator: ``onehot_logreg`` and ``hgb_native``."""
    y_train = np.array([r[schema.label] for r in train])
    y_test = np.array([r[schema.label] for r in test])
    num_tr, cat_tr, sizes = standard_features(schema, train)
    num_te, cat_te, _ = standard_features(schema, test)
    out: dict[str, Any] = {}
    if num_tr.shape[1] + cat_tr.shape[1] == 0:  # nothing but text: no tabular model
        return {m: macro_ovr_auc(y_test, None, [], schema.classes) for m in STANDARD}
    scaler = StandardScaler().fit(num_tr) if num_tr.shape[1] else None
    x_tr = np.hstack([scaler.transform(num_tr) if scaler else num_tr, _onehot(cat_tr, sizes)])
    x_te = np.hstack([scaler.transform(num_te) if scaler else num_te, _onehot(cat_te, sizes)])
    lr = LogisticRegression(max_iter=2000, random_state=seed)
    proba, cls = fit_predict(lr, x_tr, y_train, x_te)
    out["onehot_logreg"] = macro_ovr_auc(y_test, proba, cls, schema.classes)
    x_tr, x_te = np.hstack([num_tr, cat_tr]), np.hstack([num_te, cat_te])
    categorical = [False] * num_tr.shape[1] + [True] * cat_tr.shape[1]
    hgb = HistGradientBoostingClassifier(random_state=seed, early_stopping=False,
                                         categorical_features=np.array(categorical))
    threads = 1 if x_tr.size < SINGLE_THREAD_CELLS else None
    with threadpool_limits(limits=threads, user_api="openmp"):
        proba, cls = fit_predict(hgb, x_tr, y_train, x_te)
    out["hgb_native"] = macro_ovr_auc(y_test, proba, cls, schema.classes)
    return out


def evaluate_record_text(schema: Schema, train: Sequence[Row], test: Sequence[Row],
                         seed: int) -> dict[str, Any]:
    """The record with its free text, as a data scientist would model it (issue 31's
    evaluator): ``lr`` - one-hot categories, standardised numbers and TF-IDF (word 1-2
    grams) of each text field, logistic regression; ``gb`` - one-hot categories, numbers and
    a 64-dimensional SVD of each field's TF-IDF, gradient boosting. A text field whose
    training texts hold no word adds nothing (so blanking every text gives the tabular
    model)."""
    from scipy.sparse import csr_matrix, hstack
    from sklearn.decomposition import TruncatedSVD

    y_train = np.array([r[schema.label] for r in train])
    y_test = np.array([r[schema.label] for r in test])
    num_tr, cat_tr, sizes = standard_features(schema, train)
    num_te, cat_te, _ = standard_features(schema, test)
    scaler = StandardScaler().fit(num_tr) if num_tr.shape[1] else None
    base_tr = np.hstack([scaler.transform(num_tr) if scaler else num_tr, _onehot(cat_tr, sizes)])
    base_te = np.hstack([scaler.transform(num_te) if scaler else num_te, _onehot(cat_te, sizes)])
    sparse_tr, sparse_te = [csr_matrix(base_tr)], [csr_matrix(base_te)]
    dense_tr, dense_te = [base_tr], [base_te]
    for f in schema.by_kind("text"):
        vec = TfidfVectorizer(token_pattern=TOKEN_PATTERN, ngram_range=(1, 2), sublinear_tf=True)
        try:
            t_tr = vec.fit_transform([str(r.get(f.name) or "") for r in train])
        except ValueError:  # no word in any training text
            continue
        t_te = vec.transform([str(r.get(f.name) or "") for r in test])
        sparse_tr.append(t_tr)
        sparse_te.append(t_te)
        if t_tr.shape[1] > 1:
            svd = TruncatedSVD(min(64, t_tr.shape[1] - 1), random_state=seed).fit(t_tr)
            dense_tr.append(svd.transform(t_tr))
            dense_te.append(svd.transform(t_te))
    lr = LogisticRegression(max_iter=2000, random_state=seed)
    proba, cls = fit_predict(lr, hstack(sparse_tr).tocsr(), y_train, hstack(sparse_te).tocsr())
    out = {"lr": macro_ovr_auc(y_test, proba, cls, schema.classes)}
    hgb = HistGradientBoostingClassifier(random_state=seed, early_stopping=False)
    x_tr, x_te = np.hstack(dense_tr), np.hstack(dense_te)
    with threadpool_limits(limits=1 if x_tr.size < SINGLE_THREAD_CELLS else None,
                           user_api="openmp"):
        proba, cls = fit_predict(hgb, x_tr, y_train, x_te)
    out["gb"] = macro_ovr_auc(y_test, proba, cls, schema.classes)
    return out


def evaluate(schema: Schema, train: Sequence[Row], test: Sequence[Row],
             embedder: TextEncoder | None, seed: int) -> dict[str, Any]:
    """Every model (``MODELS``) trained on ``train``, scored on ``test``."""
    y_train = np.array([r[schema.label] for r in train])
    y_test = np.array([r[schema.label] for r in test])
    out: dict[str, Any] = {}
    vec = TfidfVectorizer(token_pattern=TOKEN_PATTERN, ngram_range=(1, 2), sublinear_tf=True)
    x_tr = vec.fit_transform([text_without_label(schema, r) for r in train])
    x_te = vec.transform([text_without_label(schema, r) for r in test])
    lr = LogisticRegression(max_iter=2000, random_state=seed)
    proba, cls = fit_predict(lr, x_tr, y_train, x_te)
    out["tfidf_logreg"] = macro_ovr_auc(y_test, proba, cls, schema.classes)
    hgb = HistGradientBoostingClassifier(random_state=seed, early_stopping=False)
    x_tr, x_te = tabular_features(schema, train, embedder), tabular_features(schema, test, embedder)
    threads = 1 if x_tr.size < SINGLE_THREAD_CELLS else None
    with threadpool_limits(limits=threads, user_api="openmp"):
        proba, cls = fit_predict(hgb, x_tr, y_train, x_te)
    out["hgb_embeddings"] = macro_ovr_auc(y_test, proba, cls, schema.classes)
    return {**out, **evaluate_standard(schema, train, test, seed)}


def real_sample_like(real_train: Sequence[Row], n: int, seed: int) -> list[Row]:
    """The seeded same-size real sample a synthetic set of ``n`` rows is compared with
    (in member order): every TSTR next to real data uses this one draw."""
    n = min(n, len(real_train))
    idx = np.sort(np.random.default_rng(seed).choice(len(real_train), size=n, replace=False))
    return [real_train[i] for i in idx]


def run_utility(schema: Schema, syn: Sequence[Row], real_train: Sequence[Row],
                real_test: Sequence[Row], embedder: TextEncoder | None,
                seed: int = 0, public_texts: text_quality.PublicTexts | None = None,
                extra_texts: Mapping[str, Sequence[Row]] | None = None) -> dict[str, Any]:
    """Every model on synthetic vs. a same-size real sample; with free-text fields, also the
    text-quality report (`audits.text_quality`; ``public_texts`` and ``extra_texts`` are its
    ``public`` and ``extra``) under "text"."""
    real_sample = real_sample_like(real_train, len(syn), seed)
    on_syn = evaluate(schema, syn, real_test, embedder, seed)
    on_real = evaluate(schema, real_sample, real_test, embedder, seed)
    models = {}
    for m in MODELS:
        s, r = on_syn[m]["macro_auc"], on_real[m]["macro_auc"]
        models[m] = {"synthetic": on_syn[m], "real_sample": on_real[m],
                     "gap": None if s is None or r is None else r - s}
    out = {
        "sizes": {"synthetic": len(syn), "real_train": len(real_train),
                  "real_sample": len(real_sample), "real_test": len(real_test)},
        "metric": "macro one-vs-rest ROC AUC on the real test rows",
        "seed": seed,
        "models": models,
        "features": {
            "tfidf_logreg": "TF-IDF (word 1-2 grams) of the linearised record without the "
                            "label field; logistic regression",
            "hgb_embeddings": "numeric fields, one-hot categorical fields, sentence "
                              "embeddings of free-text fields; HistGradientBoostingClassifier",
            "onehot_logreg": "standard: one-hot categorical fields, standardised numeric "
                             "fields (free text ignored); logistic regression",
            "hgb_native": "standard: numeric fields and native categorical features (free "
                          "text ignored); HistGradientBoostingClassifier",
        },
    }
    if schema.by_kind("text"):
        out["text"] = text_quality.text_quality(schema, syn, real_train, real_test,
                                                public_texts, seed, extra_texts)
    return out


def render(report: dict[str, Any], console: Console) -> None:
    r = report["result"]

    def fmt(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    t = Table(title=f"utility: {r['metric']} (n = {r['sizes']['synthetic']} training rows)")
    for col in ("model", "evaluator", "train on synthetic", "train on real sample",
                "gap (real - syn)"):
        t.add_column(col)
    for name, m in r["models"].items():
        t.add_row(name, "standard" if name in STANDARD else "this project",
                  fmt(m["synthetic"]["macro_auc"]), fmt(m["real_sample"]["macro_auc"]),
                  fmt(m["gap"]))
    console.print(t)
    if r.get("text"):
        text_quality.render(r["text"], console)


# ----- the ``selpe-audit audit utility`` kind --------------------------------------------

def _arguments(u: argparse.ArgumentParser) -> None:
    common_arguments(u)
    u.add_argument("--real-train", required=True, help="real rows for the same-size baseline")
    u.add_argument("--real-test", required=True, help="real rows to test on")
    u.add_argument("--embedder", help="sentence-transformers model folder (default bundled)")
    u.add_argument("--seed", type=int, default=0)


def _run(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    schema = load_record_schema(args.schema)
    syn = read_rows(args.synthetic, schema, "fail")
    train = read_rows(args.real_train, schema, args.invalid_rows)
    test = read_rows(args.real_test, schema, args.invalid_rows)
    embedder = load_embedder(args.embedder) if schema.by_kind("text") else None
    with Console(stderr=True, highlight=False).status("training and scoring"):
        result = run_utility(schema, syn, train, test, embedder, args.seed)
    inputs = {"synthetic": args.synthetic, "real_train": args.real_train,
              "real_test": args.real_test, "schema": args.schema}
    config = {"seed": args.seed, "embedder": args.embedder or "bundled default"}
    report = make_report("utility", inputs, config, result, t0)
    finish("utility", args, report, render)
    return 0


AUDIT = register(AuditKind("utility", "train on synthetic, test on real (macro OvR ROC AUC)",
                           _arguments, _run, __doc__))
