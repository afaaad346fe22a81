"""The utility audit's text-quality report: text-only TSTR, near-copies of private texts
(beyond what public texts explain) and diversity - numbers only, never a text."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from rich.console import Console

from audits.text_quality import text_quality
from audits.utility import render, run_utility
from selpe_audit.schema import parse_schema

SCHEMA = parse_schema({
    "type": "object", "x-label": "y",
    "properties": {
        "x": {"type": "number", "minimum": -10, "maximum": 10},
        "note": {"type": "string", "maxLength": 200},
        "y": {"type": "string", "enum": ["no", "yes"]},
    },
    "required": ["x", "note", "y"], "additionalProperties": False})
WORDS = [f"w{i}" for i in range(300)]
CUE = {"no": "calm", "yes": "fever"}
CANARY = "CANARYzq9x"


def _rows(n: int, seed: int, cue: bool = True, canary: bool = False) -> list[dict]:
    """Random-word notes; with ``cue`` the note names a word tied to the label (80 %)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        y = str(rng.choice(["no", "yes"]))
        words = list(rng.choice(WORDS, size=8))
        if cue:
            words.insert(3, CUE[y] if rng.random() < 0.8 else CUE["no" if y == "yes" else "yes"])
        if canary:
            words.append(CANARY)
        out.append({"x": float(rng.normal()), "note": " ".join(words), "y": y})
    return out


class _FakeEmbedder:
    """A deterministic stand-in for the sentence embedder (no model in fast tests)."""

    def encode(self, texts: list[str]) -> np.ndarray:
        return np.array([[len(t) % 7, t.count("e"), len(t.split())] for t in texts], float)


def test_copies_of_private_texts_are_near_copies_unless_public_explains_them():
    train, test = _rows(80, 1), _rows(40, 2)
    syn = train[:50]
    near = text_quality(SCHEMA, syn, train, test)["note"]["near_copies"]
    assert near["near_private"] == {"count": 50, "share": 1.0}
    assert near["exact_private"]["share"] == 1.0
    assert "near_private_beyond_public" not in near  # no public set given
    public = [r["note"] for r in syn]
    near = text_quality(SCHEMA, syn, train, test, public=public)["note"]["near_copies"]
    assert near["near_public"]["share"] == 1.0
    assert near["near_private_beyond_public"] == {"count": 0, "share": 0.0}
    # public texts that explain none of them (by field name): every copy is beyond public
    near = text_quality(SCHEMA, syn, train, test,
                        public={"note": ["unrelated public text"]})["note"]["near_copies"]
    assert near["near_private_beyond_public"]["share"] == 1.0


def test_a_near_copy_that_a_non_member_also_wrote_is_not_beyond_test():
    """A member's text that a held-out (test) row holds too is common phrasing, not a
    memorised text: near the private text, but not beyond test; the others are."""
    train, test = _rows(80, 1), _rows(40, 2)
    test[0]["note"] = train[0]["note"]
    near = text_quality(SCHEMA, train[:10], train, test)["note"]["near_copies"]
    assert near["near_private"] == {"count": 10, "share": 1.0}
    assert near["near_private_beyond_test"] == {"count": 9, "share": 0.9}
    near = text_quality(SCHEMA, train[:10], train, test,
                        public={"note": [train[1]["note"]]})["note"]["near_copies"]
    assert near["near_private_beyond_test"]["count"] == 8  # nor one a public text explains


def test_fresh_texts_are_not_near_copies():
    train, test = _rows(80, 1), _rows(40, 2)
    near = text_quality(SCHEMA, _rows(50, 3), train, test)["note"]["near_copies"]
    assert near["near_private"]["share"] == 0.0
    assert near["real_test_near_private"]["share"] == 0.0


def test_diversity_of_distinct_and_of_repeated_texts():
    train, test = _rows(80, 1), _rows(40, 2)
    div = text_quality(SCHEMA, _rows(60, 4), train, test)["note"]["diversity"]
    assert div["synthetic"]["distinct_texts"] == 1.0
    assert div["synthetic"]["self_similarity"] < 0.5
    assert 0 < div["synthetic"]["distinct_1"] <= 1 and 0 < div["synthetic"]["distinct_2"] <= 1
    assert div["real_sample"]["n"] == 60
    same = [{**r, "note": "the same note every time"} for r in _rows(40, 5)]
    div = text_quality(SCHEMA, same, train, test)["note"]["diversity"]["synthetic"]
    assert div["distinct_texts"] == pytest.approx(1 / 40)
    assert div["self_similarity"] == pytest.approx(1.0)
    assert div["distinct_1"] == pytest.approx(5 / (5 * 40))


def test_text_only_tstr_learns_a_label_the_text_carries():
    train, test = _rows(300, 6), _rows(200, 7)
    shuffled = [{**r, "y": y} for r, y in zip(
        train, np.random.default_rng(0).permutation([r["y"] for r in train]), strict=True)]
    anchors = [{"note": f"{CUE[y]} {CUE[y]}", "y": y} for y in ("no", "yes")]
    good = text_quality(SCHEMA, train[:150], train, test,
                        extra={"anchors": anchors})["note"]["tstr"]
    bad = text_quality(SCHEMA, shuffled[:150], train, test)["note"]["tstr"]
    for auc in (good["synthetic"], good["real_sample"], good["extra"]["anchors"],
                bad["synthetic"]):
        assert 0.0 <= auc["macro_auc"] <= 1.0
    assert good["synthetic"]["macro_auc"] > 0.7 > bad["synthetic"]["macro_auc"]
    assert good["extra"]["anchors"]["macro_auc"] > 0.7 and good["extra"]["anchors"]["n"] == 2
    assert good["gap"] == good["real_sample"]["macro_auc"] - good["synthetic"]["macro_auc"]


def test_the_report_and_its_rendering_hold_no_text():
    train, test = _rows(120, 8, canary=True), _rows(60, 9, canary=True)
    syn = train[:40] + _rows(40, 10)  # half copies of canary-carrying private rows
    u = run_utility(SCHEMA, syn, train, test, _FakeEmbedder(), seed=0,
                    public_texts=[f"public {CANARY} text"],
                    extra_texts={"anchors": [{"note": f"{CANARY} calm", "y": "no"}]})
    assert u["text"]["note"]["near_copies"]["near_private"]["share"] == 0.5
    dumped = json.dumps(u)
    assert CANARY.lower() not in dumped.lower()
    for r in train + test:
        assert r["note"] not in dumped
    for w in (*WORDS[:20], *CUE.values()):
        assert f'"{w}' not in dumped and f"{w} " not in dumped
    buf = io.StringIO()
    render({"result": u}, Console(file=buf, width=200, color_system=None))
    shown = buf.getvalue()
    assert "note" in shown and CANARY.lower() not in shown.lower() and "calm" not in shown


def test_a_schema_without_text_fields_gets_no_text_section():
    schema = parse_schema({**SCHEMA.raw, "properties": {
        k: v for k, v in SCHEMA.raw["properties"].items() if k != "note"},
        "required": ["x", "y"]})
    rows = [{k: v for k, v in r.items() if k != "note"} for r in _rows(100, 11)]
    assert text_quality(schema, rows[:40], rows, rows[40:]) == {}
    assert "text" not in run_utility(schema, rows[:40], rows, rows[40:], None, seed=0)


def test_empty_texts_do_not_break_it():
    train, test = _rows(40, 12), _rows(20, 13)
    syn = [{**r, "note": ""} for r in _rows(20, 14)]
    q = text_quality(SCHEMA, syn, [*train, {**train[0], "note": ""}], test)["note"]
    assert q["near_copies"]["near_private"]["share"] == 1.0  # an exact copy of ""
    assert q["tstr"]["synthetic"]["macro_auc"] == 0.5
    assert q["diversity"]["synthetic"]["distinct_1"] is None
