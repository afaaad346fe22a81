"""Release part 2: SelPE selection through OpenDP noisy max (pool mode, real kernel)."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scipy import stats

from release.config_file import load_config
from release.config_sections import SelectionConfig
from release.dp.noisy_max import calibrate_noisy_max_scale, make_calibrated_noisy_max
from release.ledger import LifetimeLedger
from release.pipeline import run_release
from release.selection import PoolSource, PrivateClasses, run_selection
from release.selection.selpe import batch_ids
from release.stages.sizing import SIZE_ID
from selpe_audit.artifact.document import read_release
from selpe_audit.artifact.signing import generate_keypair
from selpe_audit.demo.generator import generate_rows
from selpe_audit.kernel.distance import Kernel, KernelConfig
from selpe_audit.schema import demo_schema_path

ROOT = Path(__file__).resolve().parents[1]
CANARY = "canary okapi-5521 private complaint"


def permute_and_flip_probs(u: np.ndarray, scale: float) -> np.ndarray:
    """Exact selection probabilities of permute-and-flip (= noisy max with exponential noise)."""
    p_keep = np.exp((u - u.max()) / scale)
    probs = np.zeros(len(u))
    perms = list(itertools.permutations(range(len(u))))
    for perm in perms:
        survive = 1.0
        for i in perm:
            probs[i] += survive * p_keep[i] / len(perms)
            survive *= 1 - p_keep[i]
    return probs


def test_noisy_max_scale_is_two_over_epsilon():
    for eps in (0.1, 0.5, 2.0):
        assert math.isclose(calibrate_noisy_max_scale(7, eps), 2 / eps, rel_tol=1e-6)
        assert make_calibrated_noisy_max(7, eps).map(1.0) <= eps + 1e-12


def test_noisy_max_frequencies_match_the_mechanism():
    u = np.array([-0.1, -0.4, -0.45, -0.9])
    eps = 2.0
    m = make_calibrated_noisy_max(len(u), eps)
    n = 4000
    counts = np.bincount([m(u.tolist()) for _ in range(n)], minlength=len(u))
    expected = permute_and_flip_probs(u, calibrate_noisy_max_scale(len(u), eps)) * n
    assert stats.chisquare(counts, expected).pvalue > 1e-3


def test_batches_are_keyed_and_person_stable():
    ids = [f"P{i}" for i in range(500)]
    a, b = batch_ids(ids, b"k" * 32, 5), batch_ids(ids, b"j" * 32, 5)
    assert set(a) == set(range(5)) and (a != b).mean() > 0.5
    assert (batch_ids(ids[:10], b"k" * 32, 5) == a[:10]).all()  # independent of other ids


@pytest.fixture(scope="module")
def kernel(demo_schema, embedder):
    return Kernel(demo_schema, embedder, KernelConfig())


@pytest.fixture(scope="module")
def pool(demo_schema):
    rows = generate_rows(150, seed=999)
    for r in rows:
        r.pop("patient_id")
    return rows


@pytest.mark.model
def test_signal_winners_beat_random_candidates(demo_schema, kernel, pool):
    """At a very large epsilon the winners are closer to the private rows than random picks."""
    priv_rows = [r for r in generate_rows(200, seed=5) if r["acuity"] == 3]
    priv = PrivateClasses({3: kernel.featurize(priv_rows)},
                          {3: [r["patient_id"] for r in priv_rows]})
    source = PoolSource(demo_schema, pool, "x", seed=1)
    cfg = SelectionConfig(rounds=1, k=8, batches=3)
    run = run_selection(_only_class(demo_schema, 3), priv, kernel, source, cfg, 1000.0)
    rounds, eps = run.rounds, run.accounting.epsilon
    winners = list(rounds[0].classes[0].winners)
    feats_w = kernel.featurize(winners)
    cand = source.generate(class_value=3, positives=[], negatives=[], hints=None, n=40)
    feats_r = kernel.featurize(cand)
    scale = kernel.fit_scale(feats_r)
    d_w = kernel.pairwise(feats_w, priv.priv_features[3], scale).mean()
    d_r = kernel.pairwise(feats_r, priv.priv_features[3], scale).mean()
    assert d_w < d_r
    assert math.isclose(eps, 1000.0)


def _only_class(schema, c):
    """The demo schema restricted to one class (for a one-class selection run)."""
    raw = json.loads(json.dumps(schema.raw))
    raw["properties"][schema.label]["enum"] = [c, 99]
    from selpe_audit.schema import parse_schema

    s = parse_schema(raw)
    object.__setattr__(s, "fields", tuple(
        replace(f, enum=(c,)) if f.name == schema.label else f for f in s.fields))
    return s


@pytest.mark.model
@pytest.mark.parametrize("mode", ["selpe", "pe-histogram", "representatives"])
def test_pool_mode_release_edge_cases_ledger_and_canary(tmp_path, pool, capfd, mode):
    """Every selection mode: a signed artifact whose ledger is OpenDP's, and nothing private
    (a planted canary) in any output file, the console or the lifetime ledger."""
    rows = generate_rows(60, seed=3)
    rows = [r for r in rows if r["acuity"] != 1]  # a class with no rows
    rows[0].update(chief_complaint=CANARY, heart_rate=187, patient_id="PCANARY1")
    data = tmp_path / "priv.csv"
    pl.DataFrame(rows).write_csv(data)
    pool_path = tmp_path / "pool.jsonl"
    pool_path.write_text("".join(json.dumps(r) + "\n" for r in pool))
    priv, pub, _ = generate_keypair(tmp_path / "k.pem")
    cfg = load_config(ROOT / "examples" / "release.toml", {
        "data": data, "schema": demo_schema_path(), "release_key": priv,
        "out": tmp_path / "out", "lifetime_ledger": tmp_path / "ledger",
        "candidates": pool_path, "counts_share": 0.5, "selection_share": 0.5,
        "rounds": 2, "batches": 5, "k": 2, "selection_mode": mode,
        "counts_mode": "marginals"})  # the selection's own accounting (tests/test_counts_modes.py
    run_release(cfg)                  # covers the model counts modes)
    doc = read_release(cfg.out, [pub]).doc
    sel = doc["selection"]
    assert [r["round"] for r in sel["rounds"]] == [1, 2]
    for r in sel["rounds"]:
        assert [c["class"] for c in r["classes"]] == [1, 2, 3, 4, 5]
        for c in r["classes"]:
            assert 1 <= len(c["winners"]) <= r["quota"]
            assert len(c["partners"]) == len(c["winners"])
    assert sel["mode"] == mode
    rounds = [e for e in doc["ledger"]["entries"] if e["id"].startswith("selection/round/")]
    assert len(rounds) == 2
    if mode == "selpe":
        assert all(math.isclose(e["scale"], 2 / e["epsilon"], rel_tol=1e-6) for e in rounds)
        assert doc["ledger"]["total_delta"] == 0.0 and "selection_gdp" not in doc["guarantees"]
    else:
        _check_gaussian_ledger(doc, rounds, cfg)
    assert math.isclose(doc["ledger"]["total_epsilon"],
                        sum(e["epsilon"] for e in doc["ledger"]["entries"]), rel_tol=1e-9)
    assert doc["ledger"]["total_epsilon"] <= cfg.budget.epsilon + 1e-9
    (entry,) = LifetimeLedger(cfg.budget.lifetime_ledger, cfg.dataset).summary()["releases"]
    assert entry["delta"] >= doc["ledger"]["total_delta"]  # reserved: counted for the lifetime
    out, err = capfd.readouterr()
    blobs = [out, err] + [p.read_text(errors="replace") for p in cfg.out.rglob("*")
                          if p.is_file()]
    blobs += [p.read_text(errors="replace") for p in cfg.budget.lifetime_ledger.rglob("*")
              if p.is_file()]
    for blob in blobs:
        assert "okapi-5521" not in blob and "PCANARY1" not in blob


def _check_gaussian_ledger(doc, rounds, cfg):
    """Round entries state rho (OpenDP's Gaussian map at the stated sensitivity); the
    conversion entry is OpenDP's zCDP -> (epsilon, delta) of the composed rounds."""
    from release.dp.gaussian import make_gaussian
    from release.dp.zcdp import approx_dp_of
    from selpe_audit.artifact.guarantees import gdp_reconstruction_bound

    sel = doc["selection"]
    for e, r in zip(rounds, sel["rounds"], strict=True):
        assert e["accounting"] == "rho-zCDP" and e["epsilon"] == 0.0
        opendp_rho = make_gaussian(e["scale"]).map(r["sensitivity"])
        assert opendp_rho <= e["rho"] and math.isclose(opendp_rho, e["rho"], rel_tol=1e-6)
        assert math.isclose(e["mu"], r["sensitivity"] / e["scale"], rel_tol=1e-6)
    conv = next(e for e in doc["ledger"]["entries"] if e["id"] == "selection/zcdp-to-approx-dp")
    eps, delta = approx_dp_of(sel["schedule"], cfg.selection_delta)
    assert math.isclose(conv["epsilon"], eps, rel_tol=1e-9) and conv["delta"] == delta == 1e-6
    assert conv["epsilon"] <= cfg.budget.selection_epsilon + 1e-9
    assert sum(e["rho"] for e in rounds) <= conv["rho"] * (1 + 1e-9)
    assert doc["ledger"]["total_delta"] == doc["budget"]["delta"] == 1e-6
    counts = [e for e in doc["ledger"]["entries"] if e["id"].startswith("counts/")]
    counts_eps = sum(e["epsilon"] for e in counts)
    assert math.isclose(doc["ledger"]["total_epsilon"], counts_eps + eps, rel_tol=1e-9)
    gdp = doc["guarantees"]["selection_gdp"]
    size = next(e["epsilon"] for e in counts if e["id"] == SIZE_ID)  # the plan's row count
    assert (f"pure epsilon-DP (epsilon {counts_eps - size:.4g}) plus the row count's pure "
            f"epsilon {size:.4g}") in gdp["scope"]  # the marginals mode's own words
    mu = math.sqrt(sum(e["mu"] ** 2 for e in rounds))
    assert math.isclose(gdp["mu"], mu, rel_tol=1e-9)
    for pr in gdp["reconstruction_success_max"]:
        assert math.isclose(pr["success_max"], gdp_reconstruction_bound(mu, pr["prior"]))
        assert pr["prior"] < pr["success_max"] < 1
