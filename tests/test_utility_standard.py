"""The standard tabular TSTR evaluator (one-hot + scaled numerics LR; HGB on native
categoricals): it learns a learnable label and scores chance on shuffled labels."""

from __future__ import annotations

import numpy as np

from audits.utility import MODELS, STANDARD, evaluate_standard, run_utility, standard_features
from selpe_audit.schema import parse_schema

SCHEMA = parse_schema({
    "type": "object", "x-label": "y",
    "properties": {
        "x": {"type": "number", "minimum": -10, "maximum": 10},
        "n": {"type": "integer", "minimum": 0, "maximum": 100},
        "c": {"type": "string", "enum": ["a", "b", "c", "d"]},
        "note": {"type": "string", "maxLength": 50},
        "y": {"type": "string", "enum": ["no", "yes"]},
    },
    "required": ["x", "n", "c", "note", "y"], "additionalProperties": False})


def _rows(n: int, seed: int, shuffle: bool = False) -> list[dict]:
    """y depends on x and on c (never on the free text); optionally labels shuffled."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    c = rng.choice(list("abcd"), size=n)
    logit = 2.0 * x + np.where(np.isin(c, ["a", "b"]), 1.5, -1.5)
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-logit)), "yes", "no")
    if shuffle:
        y = rng.permutation(y)
    return [{"x": float(x[i]), "n": int(rng.integers(0, 100)), "c": str(c[i]),
             "note": "free text " + str(y[i]), "y": str(y[i])} for i in range(n)]


def test_standard_evaluator_learns_a_learnable_label():
    out = evaluate_standard(SCHEMA, _rows(600, 1), _rows(400, 2), seed=0)
    assert set(out) == set(STANDARD)
    for m in STANDARD:
        assert out[m]["macro_auc"] > 0.8, (m, out[m])


def test_standard_evaluator_is_chance_on_shuffled_labels():
    out = evaluate_standard(SCHEMA, _rows(600, 3, shuffle=True), _rows(400, 4, shuffle=True),
                            seed=0)
    for m in STANDARD:
        assert abs(out[m]["macro_auc"] - 0.5) < 0.1, (m, out[m])


def test_standard_features_ignore_free_text_and_the_label():
    rows = [*_rows(5, 5), {"x": 0.0, "n": 1, "c": "zz", "note": "", "y": "no"}]
    num, cat, sizes = standard_features(SCHEMA, rows)
    assert num.shape == (6, 2) and cat.shape == (6, 1) and sizes == [4]
    assert np.isnan(cat[-1, 0])  # a value outside the public categories: missing


def test_run_utility_reports_every_model_with_a_gap():
    # the label leaks into the free text, so this project's TF-IDF model sees it; the
    # standard evaluator ignores free text (no embedder needed: no text field in its input)
    schema = parse_schema({**SCHEMA.raw, "properties": {
        k: v for k, v in SCHEMA.raw["properties"].items() if k != "note"},
        "required": ["x", "n", "c", "y"]})
    rows = [{k: v for k, v in r.items() if k != "note"} for r in _rows(300, 6)]
    test = [{k: v for k, v in r.items() if k != "note"} for r in _rows(200, 7)]
    u = run_utility(schema, rows[:150], rows, test, None, seed=0)
    assert list(u["models"]) == list(MODELS)
    for m in MODELS:
        r = u["models"][m]
        assert r["gap"] == r["real_sample"]["macro_auc"] - r["synthetic"]["macro_auc"]
