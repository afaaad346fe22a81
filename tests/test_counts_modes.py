"""Counts modes through OpenDP's contingency tables: accounting, the artifact, no leaks."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from conftest import DEMO_SAMPLE, with_settings

from release.config_file import load_config
from release.counts.model import CONVERSION_ID
from release.dp.zcdp import approx_dp_of
from release.pipeline import run_release
from selpe_audit.artifact.counts_modes import counts_modes
from selpe_audit.artifact.document import read_release
from selpe_audit.artifact.signing import generate_keypair
from selpe_audit.errors import UserError
from selpe_audit.schema import demo_schema_path

ROOT = Path(__file__).resolve().parents[1]
CANARY_ID = "CNRYPID4242"
CANARY_TEXT = "canary okapi-narwhal-5519 complaint"

TINY_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "tiny", "description": "Fictional records for the counts-mode tests.",
    "type": "object", "x-label": "y",
    "properties": {
        "y": {"type": "string", "enum": ["a", "b"], "description": "label"},
        "u": {"type": "string", "enum": ["p", "q", "r"], "description": "one field"},
        "v": {"type": "string", "enum": ["s", "t"], "description": "another field"},
        "w": {"type": "integer", "minimum": 0, "maximum": 9, "x-bins": [0, 5, 9],
              "description": "a number"},
    },
    "required": ["y", "u", "v", "w"], "additionalProperties": False,
}


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    return generate_keypair(tmp_path_factory.mktemp("keys") / "release.pem")


def _tiny(tmp: Path, key: Path, mode: str):
    rng = np.random.default_rng(0)  # the data's choice only
    y = rng.integers(0, 2, 300)
    u = (y + rng.integers(0, 2, 300)) % 3
    rows = {"y": np.array(["a", "b"])[y], "u": np.array(["p", "q", "r"])[u],
            "v": np.array(["s", "t"])[rng.integers(0, 2, 300)], "w": rng.integers(0, 10, 300)}
    pl.DataFrame(rows).write_csv(tmp / "tiny.csv")
    (tmp / "tiny.schema.json").write_text(json.dumps(TINY_SCHEMA))
    return load_config(None, {"data": tmp / "tiny.csv", "schema": tmp / "tiny.schema.json",
                              "release_key": key, "out": tmp / f"out-{mode}",
                              "lifetime_ledger": tmp / f"ledger-{mode}", "epsilon": 2.0,
                              "counts_share": 1.0, "selection_share": 0.0,
                              "counts_mode": mode, "aim_rounds": 2})


def _check_accounting(doc: dict, budget_eps: float) -> None:
    """The conversion entry is OpenDP's conversion of the entries' total rho; totals add."""
    entries = doc["ledger"]["entries"]
    conv = next(e for e in entries if e["id"] == "counts/zcdp-to-approx-dp")
    rhos = [e["rho"] for e in entries if e.get("accounting") == "rho-zCDP"]
    assert sum(rhos) <= conv["rho"] * (1 + 1e-9)
    eps, delta = approx_dp_of([conv["rho"]], doc["budget"]["counts"]["delta"])
    assert math.isclose(conv["epsilon"], eps) and math.isclose(conv["delta"], delta)
    assert doc["ledger"]["total_epsilon"] == pytest.approx(sum(e["epsilon"] for e in entries))
    assert doc["ledger"]["total_epsilon"] <= budget_eps + 1e-9
    assert doc["ledger"]["total_delta"] == pytest.approx(doc["budget"]["delta"])


#: every registered model counts mode (a new one is released here without a word)
MODEL_MODES = [d.name for d in counts_modes() if d.audit == "model"]


def test_the_model_modes_are_the_registered_ones():
    assert {"fixed", "aim", "mst"} <= set(MODEL_MODES)


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODEL_MODES)
def test_model_modes_write_a_signed_artifact_accounted_by_opendp(tmp_path, keys, mode,
                                                                monkeypatch):
    import release.pipeline as pipeline

    priv, pub, _ = keys
    cfg = _tiny(tmp_path, priv, mode)
    released = []
    stage = pipeline.release_counts

    def kept(*args, **kwargs):  # the stage as it runs, its record kept
        released.append(stage(*args, **kwargs))
        return released[-1]

    monkeypatch.setattr(pipeline, "release_counts", kept)
    run_release(cfg)
    rel = read_release(cfg.out, [pub])
    doc = rel.doc
    _check_accounting(doc, 2.0)
    # the mode states its own accounting: OpenDP's conversion of its rho, as the ledger says
    conv = next(e for e in doc["ledger"]["entries"] if e["id"] == CONVERSION_ID)
    assert released[0].block.accounting == (
        f"rho-zCDP (rho {conv['rho']:.4g}, which OpenDP converts to "
        f"({conv['epsilon']:.4g}, {conv['delta']:.3g})-DP)")
    counts = doc["counts"]
    assert counts["mode"] == mode and counts["model"]["algorithm"] == mode
    cols = {c["name"]: c for c in counts["model"]["columns"]}
    assert set(cols) == {"y", "u", "v", "w"}
    for m in counts["model"]["marginals"]:  # every cell, the null cell last in each key set
        assert len(m["values"]) == math.prod(len(cols[c]["keys"]) + 1 for c in m["clique"])
        assert m["stddev"] > 0
    assert sum(counts["class_balance"]["dp_counts"]) == pytest.approx(300, abs=60)
    if mode == "fixed":  # the class balance and the label's marginal with every field
        cliques = sorted(tuple(m["clique"]) for m in counts["model"]["marginals"])
        assert cliques == [("y",), ("y", "u"), ("y", "v"), ("y", "w")]


def test_fixed_gives_the_class_balance_its_share(tmp_path, keys):
    priv, _, _ = keys
    cfg = with_settings(_tiny(tmp_path, priv, "fixed"), class_share=0.5)
    doc = run_release(cfg).doc
    margs = {tuple(m["clique"]): m["stddev"] for m in doc["counts"]["model"]["marginals"]}
    # rho_i is proportional to 1 / stddev_i^2: the class balance gets half of the table's
    precision = {k: 1 / s ** 2 for k, s in margs.items()}
    assert precision[("y",)] / sum(precision.values()) == pytest.approx(0.5, rel=1e-6)


def test_marginals_mode_stays_pure_dp(tmp_path, keys):
    priv, _, _ = keys
    doc = run_release(_tiny(tmp_path, priv, "marginals")).doc
    assert doc["counts"]["mode"] == "marginals" and "model" not in doc["counts"]
    assert doc["ledger"]["total_delta"] == 0 and doc["budget"]["delta"] == 0
    ids = [e["id"] for e in doc["ledger"]["entries"]]
    assert ids[:2] == ["counts/rows", "counts/class_balance"]  # the plan's count first


def test_a_delta_of_zero_is_refused_for_a_model_mode(tmp_path, keys):
    priv, _, _ = keys
    with pytest.raises(UserError, match=r"needs budget\.delta > 0"):
        with_settings(_tiny(tmp_path, priv, "fixed"), delta=0.0)


def _canary_rows(tmp: Path) -> Path:
    rows = pl.read_csv(DEMO_SAMPLE, infer_schema=False).to_dicts()
    rows[3].update(patient_id=CANARY_ID, chief_complaint=CANARY_TEXT)
    p = tmp / "canary.csv"
    pl.DataFrame(rows).write_csv(p)
    return p


@pytest.mark.model  # loads the embedder for the topic codebook
def test_topics_from_a_public_pool_and_no_canary_anywhere(tmp_path, keys):
    from selpe_audit.demo.generator import generate_rows

    priv, pub, _ = keys
    pool = tmp_path / "pool.jsonl"
    pool.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "patient_id"})
                            + "\n" for r in generate_rows(120, seed=2)))
    base = load_config(ROOT / "examples" / "release.toml", {
        "release_key": priv, "out": tmp_path / "out", "lifetime_ledger": tmp_path / "ledger",
        "enclave_log": tmp_path / "enclave.log", "schema": demo_schema_path(),
        "candidates": pool})
    cfg = with_settings(base, data=_canary_rows(tmp_path), counts_mode="fixed", topics=4)
    run_release(cfg)
    doc = read_release(cfg.out, [pub]).doc
    topics = doc["counts"]["topics"]["chief_complaint"]
    assert topics["source"] == "public pool" and 2 <= topics["k"] <= 4
    pool_texts = {json.loads(line)["chief_complaint"] for line in pool.read_text().splitlines()}
    for a in topics["anchors"]:
        assert a["text"] in pool_texts and set(a["members"]) <= pool_texts
    cols = [c["name"] for c in doc["counts"]["model"]["columns"]]
    assert "topic:chief_complaint" in cols
    assert any(m["clique"] == ["acuity", "topic:chief_complaint"]
               for m in doc["counts"]["model"]["marginals"])
    _check_accounting(doc, cfg.budget.epsilon)
    for path in [*cfg.out.rglob("*"), tmp_path / "enclave.log"]:
        if path.is_file():
            data = path.read_bytes()
            assert CANARY_ID.encode() not in data and b"okapi-narwhal" not in data, path


def _cols(fields: int, topics: int) -> list:
    from release.counts.model import ModelColumn

    return [ModelColumn("label", "label", "class", ("a", "b"), "label"),
            *(ModelColumn(f"f{i}", f"f{i}", "categories", ("x",), f"f{i}") for i in range(fields)),
            *(ModelColumn(f"topic:t#{i}", "t", "topic", ("p",), f"t{i}") for i in range(topics))]


@pytest.mark.parametrize(("fields", "topics"), [(9, 1), (9, 3), (0, 2), (4, 0)])
def test_fixed_gives_the_class_and_the_text_topics_their_shares_of_the_rho(fields, topics):
    """Fixed's query i gets rho in proportion to weight_i squared: the class balance gets
    class_share, the topics x class tables topic_share together (evenly), the fields the
    rest evenly; with one kind of column only, it gets all but the class's share."""
    from release.counts.model import fixed_workload

    queries = fixed_workload(_cols(fields, topics), class_share=0.25, topic_share=0.4)
    rho = np.array([q.weight ** 2 for q in queries])
    rho /= rho.sum()
    kinds = ["class", *["field"] * fields, *["topic"] * topics]
    share = {k: rho[[i for i, x in enumerate(kinds) if x == k]] for k in set(kinds)}
    assert share["class"].sum() == pytest.approx(0.25)
    expected = {"topic": 0.4, "field": 0.35} if fields and topics else \
        {"topic" if topics else "field": 0.75}
    for k, total in expected.items():
        assert share[k].sum() == pytest.approx(total)
        assert np.ptp(share[k]) == pytest.approx(0, abs=1e-12)
