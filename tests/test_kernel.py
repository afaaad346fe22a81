"""The multi-channel distance kernel: g in [0, 1], g(s, s) = 0, symmetry, centers, weights.

Features-level properties run without a model (arbitrary unit vectors and numbers); the
record-level properties use the real bundled embedder (marked `model`: loading it takes seconds).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from conftest import good_row
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from selpe_audit.kernel.distance import (
    CHANNEL_SETS,
    EMPTY_BATCH_DISTANCE,
    Centers,
    Features,
    Kernel,
    KernelConfig,
    NumericScale,
    available_channels,
    channel_kind,
)
from selpe_audit.schema import DRAFT_2020_12, Schema, parse_schema

ATOL = 1e-5  # float32 embeddings: cosines of a vector with itself are 1 to ~1e-7

TINY_RAW: dict[str, Any] = {
    "$schema": DRAFT_2020_12, "title": "tiny", "type": "object", "x-label": "label",
    "properties": {
        "x": {"type": "integer", "minimum": 0, "maximum": 100, "description": "x value"},
        "y": {"type": "number", "minimum": -1.0, "maximum": 1.0, "description": "y value"},
        "color": {"type": "string", "enum": ["red", "green"], "description": "color"},
        "note": {"type": "string", "maxLength": 40, "description": "note"},
        "label": {"type": "string", "enum": ["yes", "no"], "description": "label"},
    },
    "required": ["x", "y", "color", "note", "label"], "additionalProperties": False,
}
TINY = parse_schema(TINY_RAW)
TINY_CHANNELS = available_channels(TINY)
SEMANTIC = [c for c in TINY_CHANNELS if channel_kind(c) != "num"]
NUMERIC = [c for c in TINY_CHANNELS if channel_kind(c) == "num"]


# ----- strategies --------------------------------------------------------------------------

def unit_rows(n: int, d: int) -> st.SearchStrategy[np.ndarray]:
    """n arbitrary unit vectors in R^d (rows that are ~0 become a basis vector)."""
    def normalise(a: np.ndarray) -> np.ndarray:
        a = a.astype(np.float64)
        norms = np.linalg.norm(a, axis=1, keepdims=True)
        a = np.where(norms > 1e-6, a / np.where(norms > 1e-6, norms, 1.0), np.eye(1, d))
        return a.astype(np.float32)
    elems = st.floats(-100, 100, allow_nan=False, width=32)
    return arrays(np.float32, (n, d), elements=elems).map(normalise)


@st.composite
def features(draw: st.DrawFn, n: int | None = None, d: int | None = None) -> Features:
    n = draw(st.integers(0, 6)) if n is None else n
    d = draw(st.integers(1, 6)) if d is None else d
    sem = {c: draw(unit_rows(n, d)) for c in SEMANTIC}
    num = {c: draw(arrays(np.float64, (n,), elements=st.floats(-1e6, 1e6))) for c in NUMERIC}
    return Features(n=n, semantic=sem, numeric=num)


@st.composite
def configs(draw: st.DrawFn) -> KernelConfig:
    raw = draw(st.lists(st.floats(0, 10), min_size=len(TINY_CHANNELS),
                        max_size=len(TINY_CHANNELS)).filter(lambda w: sum(w) > 1e-3))
    total = math.fsum(raw)
    return KernelConfig(weights={c: w / total for c, w in zip(TINY_CHANNELS, raw, strict=True)})


scales = st.builds(lambda s: NumericScale({c: s[i] for i, c in enumerate(NUMERIC)}),
                   st.lists(st.floats(1e-3, 1e3), min_size=len(NUMERIC), max_size=len(NUMERIC)))


def naive_g(kernel: Kernel, a: Features, i: int, b: Features, j: int,
            scale: NumericScale) -> float:
    """g for one pair, channel by channel, straight from the definition."""
    total = 0.0
    for ch, w in kernel.weights.items():
        if channel_kind(ch) == "num":
            dist = abs(a.numeric[ch][i] - b.numeric[ch][j]) / scale.scales[ch]
        else:
            u, v = a.semantic[ch][i].astype(float), b.semantic[ch][j].astype(float)
            dist = (1.0 - float(np.dot(u, v))) / 2.0
        total += w * min(max(dist, 0.0), 1.0)
    return min(max(total, 0.0), 1.0)


# ----- features-level properties (no model) -------------------------------------------------

@given(data=st.data(), config=configs(), scale=scales)
@settings(max_examples=150, deadline=None)
def test_g_lies_in_unit_interval_for_arbitrary_features(data, config, scale):
    d = data.draw(st.integers(1, 6))
    a, b = data.draw(features(d=d)), data.draw(features(d=d))
    g = Kernel(TINY, None, config).pairwise(a, b, scale)
    assert g.shape == (a.n, b.n)
    assert np.all(np.isfinite(g)) and np.all(g >= 0.0) and np.all(g <= 1.0)


@given(a=features(), config=configs(), scale=scales)
@settings(max_examples=150, deadline=None)
def test_g_of_a_record_with_itself_is_zero_and_g_is_symmetric(a, config, scale):
    g = Kernel(TINY, None, config).pairwise(a, a, scale)
    np.testing.assert_allclose(np.diag(g), 0.0, atol=ATOL)
    np.testing.assert_allclose(g, g.T, atol=ATOL)


@given(data=st.data(), config=configs(), scale=scales)
@settings(max_examples=100, deadline=None)
def test_vectorised_distances_equal_a_naive_loop(data, config, scale):
    d = data.draw(st.integers(1, 6))
    priv, cand = data.draw(features(d=d)), data.draw(features(d=d))
    b = data.draw(st.integers(1, 4))
    ids = np.array(data.draw(st.lists(st.integers(0, b - 1), min_size=priv.n,
                                      max_size=priv.n)), dtype=np.int64)
    kernel = Kernel(TINY, None, config)
    centers = kernel.centers(priv, ids, b)
    got = kernel.distances(centers, cand, scale)
    assert got.shape == (b, cand.n)
    for i in range(b):
        for j in range(cand.n):
            want = (EMPTY_BATCH_DISTANCE if centers.empty[i]
                    else naive_g(kernel, centers.features, i, cand, j, scale))
            assert got[i, j] == pytest.approx(want, abs=ATOL)


@given(data=st.data(), config=configs(), scale=scales)
@settings(max_examples=100, deadline=None)
def test_center_of_one_record_is_that_record(data, config, scale):
    priv = data.draw(features(n=data.draw(st.integers(1, 5))))
    kernel = Kernel(TINY, None, config)
    centers = kernel.centers(priv, np.arange(priv.n), priv.n)
    assert not centers.empty.any()
    assert centers.features.channels == kernel.channels  # active channels only
    for ch in kernel.semantic_channels:
        np.testing.assert_allclose(centers.features.semantic[ch], priv.semantic[ch], atol=ATOL)
    for ch in kernel.numeric_channels:
        np.testing.assert_allclose(centers.features.numeric[ch], priv.numeric[ch])
    g = kernel.distances(centers, priv, scale)
    np.testing.assert_allclose(np.diag(g), 0.0, atol=ATOL)


@given(data=st.data())
@settings(max_examples=100, deadline=None)
def test_empty_batches_are_flagged_and_get_a_constant_row(data):
    b = data.draw(st.integers(1, 8))
    used = data.draw(st.sets(st.integers(0, b - 1)))
    extra = data.draw(st.lists(st.sampled_from(sorted(used)), max_size=6)) if used else []
    ids = np.array(data.draw(st.permutations(sorted(used) + extra)), dtype=np.int64)
    priv, cand = data.draw(features(n=len(ids), d=3)), data.draw(features(n=4, d=3))
    kernel = Kernel(TINY, None, KernelConfig())
    centers = kernel.centers(priv, ids, b)
    assert centers.empty.tolist() == [i not in used for i in range(b)]
    dist = kernel.distances(centers, cand, kernel.fit_scale(cand))
    assert np.all(dist[centers.empty] == EMPTY_BATCH_DISTANCE)


def test_no_private_rows_at_all_gives_all_empty_batches_without_raising():
    kernel = Kernel(TINY, None, KernelConfig())
    empty = Features(n=0, semantic={c: np.zeros((0, 3), np.float32) for c in SEMANTIC},
                     numeric={c: np.zeros(0) for c in NUMERIC})
    centers = kernel.centers(empty, np.zeros(0, dtype=np.int64), 5)
    assert centers.empty.all() and centers.b == 5


def test_antipodal_batch_has_a_zero_center_at_distance_one_half():
    kernel = Kernel(TINY, None, KernelConfig(channels="fields"))
    v = np.array([[1.0, 0.0], [-1.0, 0.0]], np.float32)
    priv = Features(n=2, semantic={c: v for c in kernel.semantic_channels})
    centers = kernel.centers(priv, np.array([0, 0]), 1)
    assert not centers.empty[0]
    np.testing.assert_allclose(kernel.distances(centers, priv, None), 0.5, atol=ATOL)


def test_channels_with_distant_numbers_saturate_at_one():
    kernel = Kernel(TINY, None, KernelConfig(weights={"num:x": 1.0}))
    a = Features(n=1, numeric={"num:x": [0.0]})
    b = Features(n=3, numeric={"num:x": [0.0, 5.0, 1e9]})
    g = kernel.pairwise(a, b, NumericScale({"num:x": 10.0}))
    np.testing.assert_allclose(g, [[0.0, 0.5, 1.0]])


def test_global_only_config_is_the_global_channel_distance():
    kernel = Kernel(TINY, None, KernelConfig(channels="global"))
    assert kernel.channels == ["global"]
    a = Features(n=1, semantic={"global": [[1.0, 0.0]]})
    b = Features(n=2, semantic={"global": [[0.0, 1.0], [-1.0, 0.0]]})
    np.testing.assert_allclose(kernel.pairwise(a, b, None), [[0.5, 1.0]], atol=ATOL)


# ----- scales --------------------------------------------------------------------------------

@given(vals=st.lists(st.floats(-1e4, 1e4), max_size=30))
@settings(max_examples=100, deadline=None)
def test_scale_lies_between_the_public_floor_and_the_public_range(vals):
    kernel = Kernel(TINY, None, KernelConfig(channels="numeric"))
    cand = Features(n=len(vals), numeric={c: vals for c in NUMERIC})
    scale = kernel.fit_scale(cand)
    for ch, rng in (("num:x", 100.0), ("num:y", 2.0)):
        assert 0.05 * rng - 1e-12 <= scale.scales[ch] <= rng


def test_scale_is_a_multiple_of_the_candidate_iqr():
    kernel = Kernel(TINY, None, KernelConfig(channels="numeric", scale_iqr_multiple=2.0))
    x = np.arange(0, 41, dtype=float)  # IQR 20
    cand = Features(n=41, numeric={"num:x": x, "num:y": np.zeros(41)})
    scale = kernel.fit_scale(cand)
    assert scale.scales["num:x"] == pytest.approx(40.0)
    assert scale.scales["num:y"] == pytest.approx(0.05 * 2.0)  # constant: the public floor


def test_missing_scale_is_an_error_naming_the_channel():
    kernel = Kernel(TINY, None, KernelConfig(weights={"num:x": 1.0}))
    a = Features(n=1, numeric={"num:x": [1.0]})
    with pytest.raises(ValueError, match="num:x"):
        kernel.pairwise(a, a, None)


# ----- configuration -------------------------------------------------------------------------

def test_default_config_weighs_every_channel_equally():
    kernel = Kernel(TINY, None)
    assert kernel.channels == ["field:x", "field:y", "field:color", "field:note",
                               "global", "num:x", "num:y"]  # no channel for the label
    assert all(w == pytest.approx(1 / 7) for w in kernel.weights.values())
    assert math.fsum(kernel.weights.values()) == pytest.approx(1.0)


@pytest.mark.parametrize("name", sorted(CHANNEL_SETS))
def test_named_channel_sets_resolve_to_weights_summing_to_one(name):
    weights = KernelConfig(channels=name).resolve(TINY)
    assert weights and math.fsum(weights.values()) == pytest.approx(1.0)
    assert {channel_kind(c) for c in weights} == set(CHANNEL_SETS[name])


def test_zero_weight_channels_are_dropped():
    cfg = KernelConfig(weights={"global": 0.5, "num:x": 0.5, "field:note": 0.0})
    assert cfg.channel_names(TINY) == ["global", "num:x"]


@pytest.mark.parametrize(("weights", "match"), [
    ({"global": -0.5, "num:x": 1.5}, "'global' must be >= 0"),
    ({"global": 0.5, "num:x": 0.4}, "must sum to 1"),
    ({"global": 0.0}, "must sum to 1"),
    ({"global": float("nan")}, "'global' must be a finite number"),
    ({"global": "1"}, "'global' must be a finite number"),
    ({"color": 1.0}, "unknown kernel channel 'color'"),
    ({}, "empty"),
])
def test_bad_weights_are_value_errors_naming_the_problem(weights, match):
    with pytest.raises(ValueError, match=match):
        KernelConfig(weights=weights)


def test_a_channel_the_schema_lacks_is_an_error_naming_it():
    cfg = KernelConfig(weights={"field:age": 0.5, "global": 0.5})
    with pytest.raises(ValueError, match="unknown kernel channel 'field:age'"):
        Kernel(TINY, None, cfg)
    with pytest.raises(ValueError, match="unknown kernel channel 'num:color'"):
        KernelConfig(weights={"num:color": 1.0}).resolve(TINY)


def test_config_errors_for_sets_and_scale_rules():
    with pytest.raises(ValueError, match="not both"):
        KernelConfig(weights={"global": 1.0}, channels="global")
    with pytest.raises(ValueError, match="unknown kernel channel set 'everything'"):
        KernelConfig(channels="everything")
    with pytest.raises(ValueError, match="scale_floor"):
        KernelConfig(scale_floor=0.0)
    with pytest.raises(ValueError, match="scale_iqr_multiple"):
        KernelConfig(scale_iqr_multiple=-1.0)
    text_only = parse_schema({**TINY_RAW, "properties": {
        k: v for k, v in TINY_RAW["properties"].items() if k not in ("x", "y")},
        "required": ["color", "note", "label"]})
    with pytest.raises(ValueError, match="'numeric' has no channel"):
        Kernel(text_only, None, KernelConfig(channels="numeric"))


def test_weights_are_copied_so_the_caller_cannot_change_a_config():
    w = {"global": 1.0}
    cfg = KernelConfig(weights=w)
    w["global"] = 7.0
    assert cfg.weights == {"global": 1.0}


# ----- input checks and privacy hygiene ------------------------------------------------------

def test_batch_ids_are_checked():
    kernel = Kernel(TINY, None, KernelConfig(channels="numeric"))
    priv = Features(n=2, numeric={"num:x": [1.0, 2.0], "num:y": [0.0, 0.0]})
    for ids, b in (([0, 3], 3), ([0, -1], 3), ([0], 3), ([0.0, 1.0], 3), ([0, 0], 0)):
        with pytest.raises(ValueError):
            kernel.centers(priv, np.array(ids), b)


def test_features_are_checked():
    with pytest.raises(ValueError, match="unit"):
        Features(n=1, semantic={"global": [[3.0, 4.0]]})
    with pytest.raises(ValueError, match="finite"):
        Features(n=1, numeric={"num:x": [float("inf")]})
    with pytest.raises(ValueError, match="shape"):
        Features(n=2, numeric={"num:x": [1.0]})
    with pytest.raises(ValueError, match="numeric"):
        Features(n=1, semantic={"num:x": [[1.0]]})
    with pytest.raises(ValueError, match="lack the kernel channel 'field:x'"):
        Kernel(TINY, None).pairwise(Features(n=0), Features(n=0), None)


def test_reprs_show_no_values_and_arrays_are_read_only():
    secret = np.array([[0.6, 0.8]], np.float32)
    f = Features(n=1, semantic={"global": secret}, numeric={"num:x": [42.125]})
    c = Centers(f, np.array([False]))
    assert repr(f) == "Features(n=1, channels=['global', 'num:x'])"
    assert "42.125" not in repr(c) and "0.6" not in repr(c)
    with pytest.raises(ValueError):
        f.numeric["num:x"][0] = 1.0
    secret[0, 0] = 0.0  # the caller's own array stays writeable
    sub = f.take([0, 0])
    assert sub.n == 2 and sub.numeric["num:x"].tolist() == [42.125, 42.125]


# ----- records, with the real embedder -------------------------------------------------------

WORDS = ["alpha", "beta", "gamma", "delta", "red", "blue", "fever", "cough", "ankle"]


@st.composite
def schemas(draw: st.DrawFn) -> Schema:
    """A small random schema: 0-2 numeric, 0-2 categorical, 0-1 text fields and a label."""
    props: dict[str, Any] = {}
    for i in range(draw(st.integers(0, 2))):
        lo = draw(st.integers(-1000, 1000))
        hi = lo + draw(st.integers(1, 1000))
        integer = draw(st.booleans())
        props[f"n{i}"] = {"type": "integer" if integer else "number", "minimum": lo,
                          "maximum": hi, "description": f"measure {i}"}
    for i in range(draw(st.integers(0, 2))):
        enum = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4, unique=True))
        props[f"c{i}"] = {"type": "string", "enum": enum, "description": f"category {i}"}
    if draw(st.booleans()):
        props["t"] = {"type": "string", "maxLength": 30, "description": "free text"}
    props["label"] = {"type": "integer", "enum": [0, 1], "description": "outcome"}
    return parse_schema({"$schema": DRAFT_2020_12, "title": "random", "type": "object",
                         "x-label": "label", "properties": props, "required": list(props),
                         "additionalProperties": False})


def record_strategy(schema: Schema) -> st.SearchStrategy[dict[str, Any]]:
    parts: dict[str, st.SearchStrategy[Any]] = {}
    for f in schema.record_fields:
        if f.kind == "numeric":
            parts[f.name] = (st.integers(int(f.minimum), int(f.maximum)) if f.is_integer
                             else st.floats(f.minimum, f.maximum))
        elif f.kind == "categorical":
            parts[f.name] = st.sampled_from(f.enum)
        else:
            parts[f.name] = st.text(st.characters(codec="utf-8"), max_size=f.max_length)
    return st.fixed_dictionaries(parts)


@pytest.mark.model
@given(data=st.data())
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_g_on_random_records_of_a_random_schema(embedder, data):
    schema = data.draw(schemas())
    records = data.draw(st.lists(record_strategy(schema), min_size=1, max_size=4))
    kernel = Kernel(schema, embedder)
    feats = kernel.featurize(records)
    scale = kernel.fit_scale(feats)
    g = kernel.pairwise(feats, feats, scale)
    assert np.all(g >= 0.0) and np.all(g <= 1.0)
    np.testing.assert_allclose(np.diag(g), 0.0, atol=ATOL)
    np.testing.assert_allclose(g, g.T, atol=ATOL)
    centers = kernel.centers(feats, np.zeros(len(records), dtype=np.int64), 2)
    dist = kernel.distances(centers, feats, scale)
    assert centers.empty.tolist() == [False, True]
    assert np.all(dist >= 0.0) and np.all(dist <= 1.0)


@pytest.mark.model
def test_demo_records_featurize_to_unit_channels_and_sensible_distances(demo_schema, embedder):
    base = {k: v for k, v in good_row().items() if k != "patient_id"}
    chest = dict(base, chief_complaint="chest pain radiating to the left arm", acuity=2)
    tight = dict(base, chief_complaint="tightness in the chest and sweating", acuity=2)
    ankle = dict(base, chief_complaint="twisted ankle playing football", acuity=5)
    kernel = Kernel(demo_schema, embedder)
    assert kernel.channels == available_channels(demo_schema)
    feats = kernel.featurize([base, chest, tight, ankle])
    for ch in kernel.semantic_channels:
        assert feats.semantic[ch].dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(feats.semantic[ch], axis=1), 1.0, atol=1e-5)
    cc = Kernel(demo_schema, embedder, KernelConfig(weights={"field:chief_complaint": 1.0}))
    g = cc.pairwise(cc.featurize([chest]), cc.featurize([tight, ankle]), None)
    assert g[0, 0] < g[0, 1]
    scale = kernel.fit_scale(feats)
    full = kernel.pairwise(feats, feats, scale)
    assert full[0, 1] > 0 and full[1, 1] == pytest.approx(0.0, abs=ATOL)
    # The sex, arrival, vitals... lexicalisations repeat across the four records.
    assert embedder.stats.cache_hits > 0


@pytest.mark.model
def test_featurize_errors_do_not_quote_private_values(demo_schema, embedder):
    kernel = Kernel(demo_schema, embedder)
    bad = dict(good_row(), heart_rate="secret-7731")
    with pytest.raises(ValueError, match="heart_rate") as e:
        kernel.featurize([bad])
    assert "secret-7731" not in str(e.value)
    missing = {k: v for k, v in good_row().items() if k != "sex"}
    with pytest.raises(ValueError, match="lacks"):
        kernel.featurize([missing])
    with pytest.raises(ValueError, match="need an embedder"):
        Kernel(demo_schema, None).featurize([good_row()])


@pytest.mark.model
def test_kernel_description_names_the_embedder(demo_schema, embedder):
    desc = Kernel(demo_schema, embedder, KernelConfig(channels="fields+global")).to_json()
    assert desc["embedder"] == embedder.info.to_json()
    assert math.fsum(desc["weights"].values()) == pytest.approx(1.0)
    assert "embedder" not in Kernel(demo_schema, embedder,
                                    KernelConfig(channels="numeric")).to_json()


@pytest.mark.model
def test_global_channel_is_the_normalised_sum_of_the_field_vectors(demo_schema, embedder):
    """Issue 33 item 2: ``global`` costs no encode of its own (the linearised record is
    distinct in every row: ~50 ms per private row); it is the record's field vectors summed
    and normalised, each distinct field value encoded once."""
    from selpe_audit.demo.generator import generate_rows

    rows = generate_rows(40, seed=5)
    kernel = Kernel(demo_schema, embedder)
    feats = kernel.featurize(rows)
    fields = [f.name for f in demo_schema.record_fields if f.name != demo_schema.label]
    for i in (0, 17, 39):
        total = np.sum([embedder.encode([demo_schema.lexicalize(f, rows[i][f])])[0]
                        for f in fields], axis=0, dtype=np.float64)
        np.testing.assert_allclose(feats.semantic["global"][i], total / np.linalg.norm(total),
                                   atol=1e-6)
    distinct = {demo_schema.lexicalize(f, r[f]) for r in rows for f in fields}
    embedder.clear_cache()
    before = embedder.stats.unique_encoded
    only_global = Kernel(demo_schema, embedder, KernelConfig(channels="global"))
    again = only_global.featurize(rows)
    assert embedder.stats.unique_encoded - before == len(distinct)  # each value once
    # the public path batches with dynamic padding: the same vectors to float rounding
    np.testing.assert_allclose(again.semantic["global"], feats.semantic["global"], atol=1e-6)
