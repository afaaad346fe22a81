"""The embedder: unit float32 rows, in-memory dedupe cache and its stats, identity, errors."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from selpe_audit.errors import UserError
from selpe_audit.kernel.embeddings import (
    DEFAULT_MODEL_NAME,
    Embedder,
    EmbedderStats,
    default_model_path,
    weights_sha256,
)


def fresh(prefix: str, k: int) -> list[str]:
    """Texts no earlier test has encoded (the session embedder's cache is shared)."""
    tag = uuid.uuid4().hex[:8]
    return [f"{prefix} {tag} number {i}" for i in range(k)]


# ----- with the real model -------------------------------------------------------------------

@pytest.mark.model
def test_rows_are_float32_unit_vectors_in_input_order(embedder):
    texts = ["heart rate in beats per minute: 88", "sex: female", "chief complaint: cough"]
    out = embedder.encode(texts)
    assert out.shape == (3, embedder.dim) and out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(embedder.encode(texts[::-1]), out[::-1])
    assert embedder.encode([]).shape == (0, embedder.dim)


@pytest.mark.model
def test_duplicates_and_repeats_are_encoded_once(embedder):
    a, b = fresh("dedupe", 2)
    before = embedder.stats
    first = embedder.encode([a, b, a, a])
    mid = embedder.stats
    assert mid.calls - before.calls == 1
    assert mid.texts_requested - before.texts_requested == 4
    assert mid.unique_encoded - before.unique_encoded == 2
    assert mid.cache_hits - before.cache_hits == 2
    np.testing.assert_array_equal(first[0], first[2])
    again = embedder.encode([b, a])
    after = embedder.stats
    assert after.unique_encoded == mid.unique_encoded  # served from the cache
    assert after.cache_hits - mid.cache_hits == 2
    np.testing.assert_array_equal(again, first[[1, 0]])
    assert after.texts_requested == after.unique_encoded + after.cache_hits
    assert set(after.to_json()) == {"calls", "texts_requested", "unique_encoded", "cache_hits",
                                    "dedupe_ratio"}  # counts only: never texts


@pytest.mark.model
def test_encoding_is_deterministic_across_instances_batches_and_cache_clears(embedder):
    texts = [*fresh("determinism", 5), "oxygen saturation in percent: 97"]
    together = embedder.encode(texts).copy()
    embedder.clear_cache()
    assert embedder.cache_size == 0
    alone = np.concatenate([embedder.encode([t]) for t in texts])
    np.testing.assert_allclose(alone, together, atol=1e-5)
    other = Embedder(default_model_path(), device="cpu", batch_size=2)
    np.testing.assert_allclose(other.encode(texts), together, atol=1e-5)


@pytest.mark.model
def test_similar_texts_are_closer_than_unrelated_ones(embedder):
    v = embedder.encode(["chest pain", "pain in the chest", "sprained ankle"])
    assert v[0] @ v[1] > v[0] @ v[2]


@pytest.mark.model
def test_info_names_the_model_and_hashes_its_weights(embedder):
    info = embedder.info
    assert info.name == DEFAULT_MODEL_NAME and info.dim == 384 == embedder.dim
    weights = default_model_path() / "model.safetensors"
    assert info.weights_sha256 == hashlib.sha256(weights.read_bytes()).hexdigest()
    assert info.to_json() == {"name": DEFAULT_MODEL_NAME, "dim": 384,
                              "weights_sha256": info.weights_sha256}
    assert embedder.device in ("cpu", "cuda")


@pytest.mark.model
def test_encode_rejects_a_bare_string(embedder):
    with pytest.raises(TypeError, match="list of strings"):
        embedder.encode("sex: female")  # type: ignore[arg-type]


# ----- without the model ---------------------------------------------------------------------

def test_dedupe_ratio():
    assert EmbedderStats(3, 10, 4, 6).dedupe_ratio == pytest.approx(2.5)
    assert EmbedderStats(0, 0, 0, 0).dedupe_ratio == 1.0


def _one_line(e: pytest.ExceptionInfo[UserError], path: Path) -> None:
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg


def test_a_missing_model_folder_is_a_one_line_user_error(tmp_path):
    for bad in (tmp_path / "nope", tmp_path / "file.bin"):
        if bad.suffix:
            bad.write_bytes(b"x")
        with pytest.raises(UserError, match="not a directory") as e:
            Embedder(bad)
        _one_line(e, bad)


def test_a_folder_that_is_not_a_model_is_a_one_line_user_error(tmp_path):
    with pytest.raises(UserError, match="not a sentence-transformers model") as e:
        Embedder(tmp_path)
    _one_line(e, tmp_path)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(UserError, match="no weights file") as e:
        Embedder(tmp_path)
    _one_line(e, tmp_path)


@pytest.mark.model
def test_a_corrupt_model_is_a_one_line_user_error(tmp_path):
    src = default_model_path()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt"):
        (tmp_path / name).write_bytes((src / name).read_bytes())
    (tmp_path / "model.safetensors").write_bytes(b"not really weights")
    with pytest.raises(UserError, match="cannot load it") as e:
        Embedder(tmp_path, device="cpu")
    _one_line(e, tmp_path)


def test_bad_batch_size_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="batch_size"):
        Embedder(tmp_path, batch_size=0)


def test_weights_hash_of_several_files_is_a_sha256sum_listing(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.safetensors").write_bytes(b"aaa")
    (tmp_path / "sub" / "b.safetensors").write_bytes(b"bbb")
    (tmp_path / "legacy.bin").write_bytes(b"ignored when safetensors exist")
    listing = "".join(f"{hashlib.sha256(data).hexdigest()}  {name}\n"
                      for name, data in (("a.safetensors", b"aaa"), ("sub/b.safetensors", b"bbb")))
    assert weights_sha256(tmp_path) == hashlib.sha256(listing.encode()).hexdigest()
    (tmp_path / "sub" / "b.safetensors").unlink()
    assert weights_sha256(tmp_path) == hashlib.sha256(b"aaa").hexdigest()


@pytest.mark.model
def test_one_more_private_row_leaves_every_other_feature_bit_identical(demo_schema, embedder):
    """Item 1 of issue 18: private features are per row (one text at a time, their own
    cache) and candidates never share a batch or a cache with a private text."""
    from release.stages.selection import private_classes
    from selpe_audit.demo.generator import generate_rows
    from selpe_audit.kernel.distance import Kernel, KernelConfig

    priv_rows = generate_rows(30, seed=21)
    added = generate_rows(1, seed=22)[0]
    record = {f.name for f in demo_schema.record_fields}
    # one candidate's texts equal the added private row's (the measured 1.8e-7 case)
    cands = [{k: v for k, v in r.items() if k in record}
             for r in [*generate_rows(10, seed=23), added]]

    def features(rows: list[dict]) -> tuple[dict, dict]:
        embedder.clear_cache()  # the session's embedder as a fresh one: both caches empty
        embedder.private_view().clear_cache()
        kernel = Kernel(demo_schema, embedder, KernelConfig())
        early = kernel.featurize(cands[:4])  # the public cache is warm before private rows
        priv = private_classes(pl.DataFrame(rows), demo_schema, kernel, "patient_id")
        late = kernel.featurize(cands)
        assert kernel.embedder.cache_size == len(  # the public cache: candidate texts only
            {t for r in cands for t in _texts(demo_schema, kernel, r)})
        for ch in early.semantic:
            assert np.array_equal(early.semantic[ch], late.semantic[ch][:4])
        return priv.priv_features, {**late.semantic, **late.numeric}

    base_priv, base_cand = features(priv_rows)
    more_priv, more_cand = features([*priv_rows, added])
    c_added = added[demo_schema.label]
    for c, feats in base_priv.items():
        other = more_priv[c]
        n = feats.n
        assert other.n == n + (c == c_added)
        for ch in feats.semantic:
            assert other.semantic[ch].dtype == np.float32
            assert np.array_equal(other.semantic[ch][:n], feats.semantic[ch]), (c, ch)
        for ch in feats.numeric:
            assert np.array_equal(other.numeric[ch][:n], feats.numeric[ch]), (c, ch)
    for ch, v in base_cand.items():
        assert np.array_equal(more_cand[ch], v), ch


def _texts(schema, kernel, record) -> list[str]:
    """The texts `Kernel.featurize` encodes for one record: its fields' lexicalisations
    (``global`` is their vectors' normalised sum, no text of its own)."""
    return [schema.lexicalize(f.name, record[f.name]) for f in schema.record_fields
            if f.name != schema.label]


@pytest.mark.model
def test_one_private_view_per_embedder(embedder):
    """A release embeds a private text once for its topic and selection (one shared view),
    leaves torch's thread count as it found it, and gets the public path's vectors up to
    padding (~1e-7)."""
    import torch

    view = embedder.private_view()
    assert embedder.private_view() is view
    before = torch.get_num_threads()
    texts = fresh("shared-view", 3)
    alone = view.encode(texts)
    assert view.cache_size >= 3 and torch.get_num_threads() == before
    np.testing.assert_allclose(alone, embedder.encode(texts), atol=1e-5)  # same vectors
    view.clear_cache()
    assert view.cache_size == 0


@pytest.mark.model
def test_a_private_vector_is_the_same_alone_and_in_a_batch_of_others(embedder):
    """Issue 33 item 2, on this machine's backend: every private text's vector, bit for bit,
    is the same when it is encoded alone (its fixed-shape batch otherwise empty fillers) and
    at any slot of a batch of other private texts - short texts, long records and texts
    whose lengths fall in different padded lengths, in batches that are full and not."""
    from selpe_audit.demo.generator import generate_rows
    from selpe_audit.kernel.embeddings import PRIVATE_BATCH, PrivateEncoder

    rows = generate_rows(40, seed=31)
    short = sorted({v for r in rows for v in r.values() if isinstance(v, str)})[:36]
    texts = [*short, *(" ".join(f"{k}: {v}" for k, v in r.items()) for r in rows[:10]), ""]
    batched = PrivateEncoder(embedder).encode(texts)  # many per batch, mixed lengths
    lengths = {embedder.padded_length(n) for n in embedder._token_counts(texts)}
    assert len(lengths) >= 3 and len(texts) > 2 * PRIVATE_BATCH
    reversed_ = PrivateEncoder(embedder).encode(texts[::-1])[::-1]  # other slots, neighbours
    for i, t in enumerate(texts):
        view = PrivateEncoder(embedder)  # a fresh view: no cache, t is the batch's only row
        alone = view.encode([t])[0]
        assert np.array_equal(alone, batched[i]), i
        assert np.array_equal(alone, reversed_[i]), i
    assert all(PrivateEncoder(embedder).batch_invariant(n) for n in lengths)  # not fallback
    np.testing.assert_allclose(batched, embedder.encode(texts), atol=1e-5)
