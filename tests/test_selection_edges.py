"""SelPE edge cases: identical candidates, a class smaller than b, a class with no rows."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from scipy import stats

from release.config_sections import SelectionConfig
from release.dp.noisy_max import calibrate_noisy_max_scale
from release.selection import PoolSource, PrivateClasses, run_selection
from release.selection.selpe import batch_votes, one_class_per_unit
from selpe_audit.demo.generator import generate_rows
from selpe_audit.kernel.distance import Kernel, KernelConfig


@pytest.fixture(scope="module")
def kernel(demo_schema, embedder):
    return Kernel(demo_schema, embedder, KernelConfig())


def _private(kernel, rows_by_class):
    return PrivateClasses(
        {c: kernel.featurize(rows) for c, rows in rows_by_class.items() if rows},
        {c: [r["patient_id"] for r in rows] for c, rows in rows_by_class.items() if rows})


@pytest.mark.model
def test_identical_candidates_small_and_empty_classes(demo_schema, kernel):
    rows = generate_rows(300, seed=21)
    by_class = {c: [r for r in rows if r["acuity"] == c] for c in demo_schema.classes}
    by_class[1] = []                      # a class with no rows
    by_class[2] = by_class[2][:2]         # fewer rows than batches: some batches empty
    one = {k: v for k, v in rows[0].items() if k != "patient_id"}
    source = PoolSource(demo_schema, [dict(one, acuity=c) for c in demo_schema.classes],
                        "identical", seed=0)
    cfg = SelectionConfig(rounds=3, k=3, batches=5)
    run = run_selection(demo_schema, _private(kernel, by_class), kernel, source, cfg, 0.9)
    rounds, eps = run.rounds, run.accounting.epsilon
    assert math.isclose(eps, 0.9)
    assert [r.round for r in rounds] == [1, 2, 3]
    for r in rounds:
        assert [c.class_value for c in r.classes] == list(demo_schema.classes)
        for c in r.classes:
            # every candidate is the same record: winners and partners are that record
            assert 1 <= len(c.winners) <= r.quota
            assert len(c.partners) == len(c.winners)
            assert all(w == dict(one, acuity=c.class_value) for w in c.winners + c.partners)


@pytest.mark.model
def test_empty_class_selects_uniformly(demo_schema, kernel):
    """With no private rows every batch's utilities are equal: each batch picks uniformly."""
    pool = generate_rows(4, seed=8)
    for r in pool:
        r.pop("patient_id")
    feats = kernel.featurize(pool)
    pools = {3: (feats, kernel.fit_scale(feats))}
    b = 2000
    chosen = batch_votes(PrivateClasses({}, {}), kernel, pools, b, 1.0,
                           calibrate_noisy_max_scale(4, 1.0), b"k" * 32)[3]
    counts = np.bincount(chosen, minlength=4)
    assert stats.chisquare(counts, [b / 4] * 4).pvalue > 1e-3


def test_one_person_moves_one_class_only(demo_schema):
    """Person mode: a person's rows in several classes are cut to one class (most rows)."""
    rows = [{"patient_id": "A", "acuity": 2}, {"patient_id": "A", "acuity": 4},
            {"patient_id": "A", "acuity": 4}, {"patient_id": "B", "acuity": 5},
            {"patient_id": "C", "acuity": 3}, {"patient_id": "C", "acuity": 1}]
    frame = pl.DataFrame(rows)
    kept = one_class_per_unit(frame, demo_schema, "patient_id").to_dicts()
    assert kept == [rows[1], rows[2], rows[3], rows[5]]  # A: class 4; C: tie -> class 1
    by_person: dict = {}
    for r in kept:
        by_person.setdefault(r["patient_id"], set()).add(r["acuity"])
    assert all(len(c) == 1 for c in by_person.values())
    assert one_class_per_unit(frame, demo_schema, None).to_dicts() == rows  # row units


# ----- issue 18 item 4: the round enforces its own sensitivity --------------------------------

def _numeric_private(demo_schema, rows):
    kernel = Kernel(demo_schema, None, KernelConfig(channels="numeric"))
    classes = list(demo_schema.classes)
    by = {c: [r for r in rows if r["acuity"] == c] for c in classes}
    return kernel, PrivateClasses({c: kernel.featurize_private(v) for c, v in by.items() if v},
                                  {c: [r["patient_id"] for r in v] for c, v in by.items()})


def test_selpe_input_keeps_one_class_per_unit_and_the_round_map_is_opendps(demo_schema):
    from opendp.mod import GLOBAL_FEATURES

    from release.dp.user import HONEST_BUT_CURIOUS
    from release.selection import OneClassPerUnit
    from release.selection.selpe import batch_utilities, round_measurement

    rows = generate_rows(60, seed=31)
    a = dict(rows[0], patient_id="A", acuity=2)
    a4 = [dict(rows[i], patient_id="A", acuity=4) for i in (1, 2)]  # A: most rows in class 4
    kernel, priv = _numeric_private(demo_schema, [*rows, a, *a4])
    kept = OneClassPerUnit(priv)
    homes = {c for c, ids in kept.priv_unit_ids.items() if "A" in ids}
    assert homes == {4} and kept.priv_unit_ids[4].count("A") == 2
    assert all(kept.priv_features[c].n == len(ids) for c, ids in kept.priv_unit_ids.items()
               if ids)
    assert OneClassPerUnit(kept).priv_unit_ids == kept.priv_unit_ids  # idempotent
    with pytest.raises(AttributeError):
        kept.priv_unit_ids = {}

    pool = [{k: v for k, v in r.items() if k != "patient_id"} for r in generate_rows(6, 32)]
    feats = kernel.featurize(pool)
    pools = {c: (feats, kernel.fit_scale(feats)) for c in demo_schema.classes}
    key, b = b"k" * 32, 3
    with pytest.raises(TypeError, match="OneClassPerUnit"):  # the batches refuse raw input
        batch_utilities(priv, kernel, pools, 2, 0, b, key)
    # A's class-2 row is cut by the rule: class 2's utilities are those without it
    _, without = _numeric_private(demo_schema, [*rows, *a4])
    for i in range(b):
        np.testing.assert_array_equal(
            batch_utilities(kept, kernel, pools, 2, i, b, key),
            batch_utilities(OneClassPerUnit(without), kernel, pools, 2, i, b, key))

    eps = 0.7
    m = round_measurement(kernel, pools, b, calibrate_noisy_max_scale(feats.n, eps), key)
    assert HONEST_BUT_CURIOUS not in GLOBAL_FEATURES  # on only inside user constructors
    assert m.map(1) == pytest.approx(eps, rel=1e-12) and m.map(1) <= eps
    assert m.map(2) == pytest.approx(2 * eps, rel=1e-12)  # two units: two batches at most
    out = m(priv)
    assert set(out) == set(demo_schema.classes)
    assert all(len(v) == b and all(0 <= j < feats.n for j in v) for v in out.values())
