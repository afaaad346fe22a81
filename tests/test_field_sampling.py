"""Structured fields from a released counts block (issue #20): the one rule decode's marginals
decoder and the release's LLM candidates share, and the candidates' text checks (no LLM here:
a stand-in model and text writer; the bundled model runs in test_selection_llm)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from release.selection.candidates import TEXT_ROUNDS, LLMSource
from selpe_audit.artifact.sampling import FieldSampler, field_probs
from selpe_audit.artifact.view import counts_view
from selpe_audit.bins import grid
from selpe_audit.errors import UserError


def _block(schema, sex: list[list[int]], age: list[list[int]]) -> dict:
    """A counts block with two histograms (sex, age); every other field has none."""
    f = schema.field("age")
    return {"signed": True, "class_balance": {"mechanism_id": "b", "classes": schema.classes,
                                              "dp_counts": [10] * len(schema.classes)},
            "histograms": {
                "sex": {"mechanism_id": "s", "kind": "categories",
                        "keys": schema.field("sex").enum, "dp_counts_by_class": sex},
                "age": {"mechanism_id": "a", "kind": "bins",
                        "keys": list(range(len(f.bins) - 1)), "edges": f.bins,
                        "dp_counts_by_class": age}}}


@pytest.fixture()
def counts(demo_schema):
    n = len(demo_schema.classes)
    sex = [[10, -5, 30]] + [[-1, -2, -3]] * (n - 1)             # class 2..: all clamp to 0
    age = [[0, 0, 40, -7, 0, 0]] + [[5, 5, 5, 5, 5, 5]] * (n - 1)
    return counts_view(_block(demo_schema, sex, age))


def test_probabilities_follow_the_clamped_counts(demo_schema, counts):
    probs = field_probs(demo_schema, counts)
    first, second = demo_schema.classes[:2]
    assert np.allclose(probs[first]["sex"], [0.25, 0.0, 0.75])
    assert np.allclose(probs[second]["sex"], [1 / 3] * 3)       # no signal left: uniform
    assert np.allclose(probs[first]["age"], [0, 0, 1, 0, 0, 0])  # a negative count is ~0
    assert np.allclose(probs[second]["age"], [1 / 6] * 6)
    arrival = demo_schema.field("arrival_mode")                 # no histogram: uniform
    assert np.allclose(probs[first]["arrival_mode"], [1 / len(arrival.enum)] * len(arrival.enum))
    hr = demo_schema.field("heart_rate")                        # ... over the grid points
    sizes = np.array([hi - lo for lo, hi in (grid(hr, j) for j in range(len(hr.bins) - 1))])
    assert np.allclose(probs[first]["heart_rate"], sizes / sizes.sum())


def test_drawn_fields_fall_in_released_cells_and_in_range(demo_schema, counts):
    sampler = FieldSampler(demo_schema, counts)
    rng = np.random.default_rng(0)
    first = demo_schema.classes[0]
    drawn = [sampler.draw(first, rng) for _ in range(400)]
    validator = demo_schema.record_validator()
    for rec in drawn:
        assert rec[demo_schema.label] == first and "chief_complaint" not in rec
        assert rec["sex"] != "male"                              # its count clamps to 0
        assert demo_schema.field("age").bin_index(rec["age"]) == 2  # the one bin with mass
        for f in demo_schema.by_kind("numeric"):
            assert f.minimum <= rec[f.name] <= f.maximum
        assert validator.is_valid({**rec, "chief_complaint": "cough"})
    share = np.mean([r["sex"] == "other" for r in drawn])
    assert 0.68 < share < 0.82                                   # about 0.75


def test_a_histogram_of_the_wrong_width_is_refused(demo_schema):
    n = len(demo_schema.classes)
    bad = counts_view(_block(demo_schema, [[1, 2]] * n, [[1] * 6] * n))
    with pytest.raises(ValueError, match="'sex'"):
        field_probs(demo_schema, bad)


class _Writer:
    """Stands in for `TextWriter`: writes ``text`` or, when None, hands every draft back."""

    def __init__(self, text: str | None) -> None:
        self.text, self.calls = text, 0
        self.stats = SimpleNamespace(records=0, invalid=0, placeholders=0, copies=0, fallbacks=0)

    def write(self, f, class_value, examples, drafts, base):
        self.calls += 1
        self.drafts = list(drafts)
        if self.text is None:
            self.stats.placeholders += len(drafts)
            self.stats.fallbacks += len(drafts)
            return list(drafts)
        for d in drafts:
            d.values[f.name] = self.text
        self.stats.records += len(drafts)
        return []


def _stand_in_model() -> SimpleNamespace:
    """An object with the model's description only (nothing is generated)."""
    return SimpleNamespace(info=SimpleNamespace(name="stand-in", sha256="0" * 64), seed=0)


@pytest.fixture()
def source(demo_schema, counts):
    """An `LLMSource` over a stand-in model, handed the counts (post-processing)."""
    src = LLMSource(demo_schema, _stand_in_model(), seed=3)
    src.use_counts(counts)
    return src


def test_candidates_take_fields_from_the_counts_and_text_from_the_writer(demo_schema, source):
    source.writer = _Writer("sore throat since yesterday")
    first = demo_schema.classes[0]
    out = source.generate(class_value=first, positives=[], negatives=[], hints=None, n=6)
    assert len(out) == 6 and all(demo_schema.record_validator().is_valid(r) for r in out)
    assert all(list(r) == [f.name for f in demo_schema.record_fields] for r in out)
    assert all(demo_schema.field("age").bin_index(r["age"]) == 2 for r in out)
    again = source.generate(class_value=first, positives=[], negatives=[], hints=None, n=6)
    assert again != out  # a fresh seed per call
    desc = source.describe()
    assert desc["text"] == {"written": 6 * 2, "refused": 0, "placeholders": 0, "copies": 0,
                            "retried": 0}
    assert "fields_from" in desc


def test_a_text_refused_every_round_stops_the_release(demo_schema, source):
    source.writer = _Writer(None)
    with pytest.raises(UserError, match="chief_complaint") as e:
        source.generate(class_value=demo_schema.classes[0], positives=[], negatives=[],
                        hints=None, n=2)
    assert "\n" not in str(e.value) and source.writer.calls == TEXT_ROUNDS
    assert source.describe()["text"]["placeholders"] == 2 * TEXT_ROUNDS


def test_a_schema_without_free_text_needs_no_text_writer(demo_schema, counts):
    from selpe_audit.schema import parse_schema

    raw = demo_schema.raw
    props = {k: v for k, v in raw["properties"].items() if k != "chief_complaint"}
    schema = parse_schema({**raw, "properties": props,
                           "required": [k for k in raw["required"] if k != "chief_complaint"]})
    src = LLMSource(schema, _stand_in_model(), seed=3)
    src.use_counts(counts)
    src.writer = _Writer(None)  # would refuse every text: it must not be asked
    out = src.generate(class_value=schema.classes[1], positives=[], negatives=[], hints=None,
                       n=4)
    assert len(out) == 4 and src.writer.calls == 0
    assert all(schema.record_validator().is_valid(r) for r in out)


def test_before_the_counts_the_source_stays_two_stage(demo_schema):
    src = LLMSource(demo_schema, _stand_in_model(), seed=3)
    calls: list[int] = []
    src.generator = SimpleNamespace(generate=lambda **kw: calls.append(kw["n"]) or [])
    src.generate(class_value=1, positives=[], negatives=[], hints=None, n=5)
    assert calls == [5] and "text" not in src.describe()


def test_public_records_use_the_schema_alone(demo_schema):
    """The topic codebooks' LLM texts, written before any row is read: uniform fields, the
    schema's example texts as hints, no exemplars."""
    src = LLMSource(demo_schema, _stand_in_model(), seed=3)
    src.writer = _Writer("a cough since Monday")
    out = src.public_records(2, 40)
    assert len(out) == 40 and all(demo_schema.record_validator().is_valid(r) for r in out)
    assert {r["acuity"] for r in out} == {2} and len({r["age"] for r in out}) > 10
    examples = set(demo_schema.field("chief_complaint").examples)
    hints = [d.topic_texts for d in src.writer.drafts]
    assert all(len(h) == 3 and set(h) <= examples for h in hints)
    assert len({tuple(h) for h in hints}) > 1
    assert src.public_records(2, 40) == out  # a function of the seed and class
