"""The release's plan: one DP count of the rows, then each part sized from it and public facts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from conftest import DEMO_SAMPLE

from release.config_file import load_config
from release.counts.workload import size_workload
from release.dp.counts import NoisyCount
from release.pipeline import run_release
from release.plan import SIZE_SHARE, budget_split, plan_release
from selpe_audit.artifact.document import read_release
from selpe_audit.artifact.model_block import check_model, merged_edges, parse_model
from selpe_audit.artifact.records import json_form
from selpe_audit.artifact.signing import generate_keypair
from selpe_audit.schema import load_schema, parse_schema

#: a label, a field of many categories, a number over ten public bins, a plain field
WIDE = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "wide", "description": "Fictional records for the plan's tests.",
    "type": "object", "x-label": "y",
    "properties": {
        "y": {"type": "string", "enum": ["a", "b"], "description": "label"},
        "u": {"type": "string", "enum": [f"u{i}" for i in range(16)],
              "description": "a field of many categories"},
        "w": {"type": "integer", "minimum": 0, "maximum": 99,
              "x-bins": [*range(0, 99, 5), 99], "description": "a number"},
        "v": {"type": "string", "enum": ["s", "t"], "description": "a plain field"},
    },
    "required": ["y", "u", "w", "v"], "additionalProperties": False,
}
ROWS = 120


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    return generate_keypair(tmp_path_factory.mktemp("keys") / "release.pem")


def _table(tmp: Path, key: Path, seed: int, tag: str, epsilon: float = 1.0):
    """A release config over ``ROWS`` fictional rows whose contents depend on ``seed``."""
    rng = np.random.default_rng(seed)  # the data's choice only
    y = rng.integers(0, 2, ROWS)
    rows = {"y": np.array(["a", "b"])[y],
            "u": np.array([f"u{i}" for i in range(16)])[(y * 5 + rng.integers(0, 4, ROWS)) % 16],
            "w": np.clip(y * 40 + rng.integers(0, 50, ROWS), 0, 99),
            "v": np.array(["s", "t"])[rng.integers(0, 2, ROWS)]}
    pl.DataFrame(rows).write_csv(tmp / f"{tag}.csv")
    (tmp / "wide.schema.json").write_text(json.dumps(WIDE))
    return load_config(None, {"data": tmp / f"{tag}.csv", "schema": tmp / "wide.schema.json",
                              "release_key": key, "out": tmp / f"out-{tag}",
                              "lifetime_ledger": tmp / f"ledger-{tag}", "epsilon": epsilon})


def test_size_workload_merges_bins_and_measures_a_sparse_field_alone():
    """At 120 rows and epsilon 1 a class x u cell (16 categories) holds about 4 rows against
    a noise of about 9: u is measured alone; w's twenty bins are merged, the narrowest
    first, until a cell can rise above the noise; v passes as it is."""
    schema = parse_schema(WIDE)
    w = size_workload(schema, ROWS, 0.023, 1.0, 0.25, 0.3, 0, 1.0)
    by = {f.field: f for f in w.fields}
    assert by["u"].margin == "one-way" and by["v"].margin == "class"
    assert by["w"].margin == "class" and len(by["w"].edges) - 1 < 20
    assert merged_edges(tuple(schema.field("w").bins), by["w"].edges)
    assert ROWS / 2 / (len(by["w"].edges) - 1) >= w.noise_sigma
    # more rows, or a larger budget: every field with the class over its public bins
    large = size_workload(schema, 100 * ROWS, 0.023, 1.0, 0.25, 0.3, 0, 1.0)
    assert all(f.margin == "class" for f in large.fields)
    assert large.field("w").edges == tuple(schema.field("w").bins)
    off = size_workload(schema, ROWS, 0.023, 1.0, 0.25, 0.3, 0, 0.0)  # signal_sigmas 0
    assert all(f.margin == "class" for f in off.fields)


@pytest.mark.slow
def test_the_workload_reads_the_schema_and_the_count_only(tmp_path, keys):
    """Two tables of the same size with different contents: each artifact's plan is what
    `plan_release` makes of its DP count alone, and given the same count both tables get
    the same plan; the released model is that plan's (merged bins, a field alone)."""
    priv, pub, _ = keys
    cfg_a, cfg_b = _table(tmp_path, priv, 1, "a"), _table(tmp_path, priv, 2, "b")
    assert (tmp_path / "a.csv").read_bytes() != (tmp_path / "b.csv").read_bytes()
    schema = load_schema(cfg_a.schema)
    docs = [read_release(run_release(cfg).path.parent, [pub]).doc for cfg in (cfg_a, cfg_b)]
    def replanned(cfg: Any, plan: dict) -> dict:
        return json_form(plan_release(cfg, schema, _count(plan), budget_split(cfg, schema)).record)

    for cfg, doc in zip((cfg_a, cfg_b), docs, strict=True):
        assert replanned(cfg, doc["budget"]["plan"]) == doc["budget"]["plan"]
    plan_a = docs[0]["budget"]["plan"]
    assert replanned(cfg_b, plan_a) == plan_a
    # the released model follows the plan: u measured alone, w over merged bins (a noisy
    # count of 120 rows would have to pass 300 for either to change: scale 20)
    model = parse_model(docs[0]["counts"]["model"])
    check_model(model, schema, {})
    cliques = {tuple(m.clique) for m in model.marginals}
    choices = {c["part"]: c["choice"] for c in plan_a["choices"]}
    assert choices["counts: u"].startswith("alone")
    assert ("u",) in cliques and ("y", "u") not in cliques and ("y", "w") in cliques
    w_col = model.column("w")
    assert merged_edges(tuple(schema.field("w").bins), w_col.edges)
    assert len(w_col.keys) == len(w_col.edges) - 1 < 20


def test_the_budget_split_is_computed_once_and_adds_up(tmp_path, keys, demo_schema):
    """One `BudgetSplit` from the configuration: counts and selection make the release's
    epsilon and delta; the row count, each vocabulary that runs and the marginals make the
    counts'; the plan carries it, and the artifact's ledger spends it."""
    cfg = load_config(None, {"data": DEMO_SAMPLE, "schema": tmp_path / "s.json",
                             "release_key": keys[0], "out": tmp_path / "o", "epsilon": 3.0,
                             "counts_share": 0.6, "selection_share": 0.4,
                             "lifetime_ledger": tmp_path / "l"})
    split = budget_split(cfg, demo_schema)
    assert split.vocabulary_fields == ("chief_complaint",)
    assert sum(x[0] for x in (split.counts, split.selection)) == pytest.approx(3.0)
    assert split.counts[1] + split.selection[1] == pytest.approx(cfg.release_delta)
    assert split.size_epsilon == pytest.approx(3.0 * SIZE_SHARE)
    for n in (0, 1):
        eps, delta = split.marginals(n)
        assert eps + split.size_epsilon + n * split.vocabulary[0] == pytest.approx(1.8)
        assert delta + n * split.vocabulary[1] == pytest.approx(split.counts[1])
    plan = plan_release(cfg, demo_schema, NoisyCount(100_000, "Integer Laplace", 20.0, 0.15),
                        budget_split(cfg, demo_schema))
    assert plan.split == split and plan.vocabulary_fields == ("chief_complaint",)
    assert plan.marginals == split.marginals(1)


def _count(plan: dict) -> NoisyCount:
    """The DP row count an artifact's plan was sized by."""
    return NoisyCount(plan["rows"], "Integer Laplace", plan["rows_scale"], plan["rows_epsilon"])


@pytest.mark.slow
def test_the_ledger_shows_the_row_count(tmp_path, keys):
    """The plan's count is an OpenDP integer Laplace count at `SIZE_SHARE` of epsilon, in
    the ledger and in the plan; the totals add up to the budget."""
    priv, pub, _ = keys
    cfg = _table(tmp_path, priv, 3, "c", epsilon=2.0)
    doc = read_release(run_release(cfg).path.parent, [pub]).doc
    entries = {e["id"]: e for e in doc["ledger"]["entries"]}
    rows = entries["counts/rows"]
    assert rows["epsilon"] == pytest.approx(SIZE_SHARE * 2.0, rel=1e-9)
    assert "Integer Laplace" in rows["mechanism"] and rows["scale"] > 0
    plan = doc["budget"]["plan"]
    assert plan["rows_epsilon"] == pytest.approx(rows["epsilon"])
    assert plan["rows_scale"] == pytest.approx(rows["scale"])
    assert doc["ledger"]["total_epsilon"] == pytest.approx(
        sum(e["epsilon"] for e in doc["ledger"]["entries"]))
    assert doc["ledger"]["total_epsilon"] <= 2.0 + 1e-9
    assert "row count" in doc["ledger"]["accountant"]


@pytest.mark.slow
def test_decode_draws_a_number_within_its_merged_bin(tmp_path, keys):
    """A merged bin is drawn uniformly among all its grid points (both sides of a removed
    public edge), and the class-conditional histogram the artifact shows stays over the
    public bins."""
    from decode.pipeline import DecodeSettings, run_decode

    priv, pub, _ = keys
    cfg = _table(tmp_path, priv, 4, "d")
    out = run_release(cfg).path.parent
    doc = read_release(out, [pub]).doc
    schema = load_schema(cfg.schema)
    col = parse_model(doc["counts"]["model"]).column("w")
    assert doc["counts"]["histograms"]["w"]["keys"] == schema.field("w").bin_labels()
    run_decode(out, [pub], 0, tmp_path / "syn.csv", DecodeSettings(n=2000, decoder="model"))
    values = pl.read_csv(tmp_path / "syn.csv")["w"].to_list()
    assert all(0 <= v <= 99 for v in values)
    assert col.edges is not None  # twenty bins of about 3 rows a class: merged
    removed = sorted(set(schema.field("w").bins) - set(col.edges))
    checked = 0
    for edge in removed:  # values on both sides of an edge the merge removed
        lo = max(e for e in col.edges if e < edge)
        hi = min(e for e in col.edges if e > edge)
        inside = [v for v in values if lo <= v < hi]
        if len(inside) >= 50:
            assert any(v < edge for v in inside) and any(v >= edge for v in inside)
            checked += 1
    assert checked


def test_a_model_column_must_merge_public_bins():
    schema = parse_schema(WIDE)
    public = tuple(schema.field("w").bins)
    assert merged_edges(public, None) and merged_edges(public, (0, 50, 99))
    assert not merged_edges(public, (0, 52, 99))  # not a public edge
    assert not merged_edges(public, (10, 50, 99))  # not from the first edge
    assert not merged_edges(public, (0, 50, 40, 99))  # not in order


@pytest.mark.slow
def test_a_vocabulary_the_table_cannot_support_is_skipped(tmp_path, keys):
    """On the bundled 400 demo rows a keyword written by 1 unit in 20 stays below OpenDP's
    threshold: the vocabulary does not run (no ledger entry, no topic column), its epsilon
    goes to the counts, and the model decoder writes the neutral placeholder."""
    from decode.pipeline import DecodeSettings, run_decode
    from selpe_audit.schema import demo_schema_path

    priv, pub, _ = keys
    cfg = load_config(None, {"data": DEMO_SAMPLE, "schema": demo_schema_path(),
                             "release_key": priv, "out": tmp_path / "out",
                             "lifetime_ledger": tmp_path / "ledger"})
    out = run_release(cfg).path.parent
    doc = read_release(out, [pub]).doc
    choice = next(c for c in doc["budget"]["plan"]["choices"]
                  if c["part"] == "vocabulary: chief_complaint")
    assert choice["choice"] == "skipped" and "threshold" in choice["reason"]
    assert not any(e["id"].startswith("counts/keywords") for e in doc["ledger"]["entries"])
    assert "topics" not in doc["counts"] and doc["selection"] is None
    run_decode(out, [pub], 0, tmp_path / "syn.csv", DecodeSettings(n=50, decoder="model"))
    assert set(pl.read_csv(tmp_path / "syn.csv")["chief_complaint"]) == {"not released"}


def test_the_review_shows_the_plan_with_its_reasons(tmp_path, keys):
    from selpe_audit.review.page import render_review_html

    priv, pub, _ = keys
    cfg = _table(tmp_path, priv, 5, "e")
    doc = read_release(run_release(cfg).path.parent, [pub]).doc
    page = render_review_html(doc)
    assert '<section id="plan">' in page and "a DP count at epsilon" in page
    for c in doc["budget"]["plan"]["choices"]:
        assert c["part"] in page and c["reason"].split(":")[0] in page


@pytest.mark.slow
@pytest.mark.parametrize("max_contributions", [1, 2])
def test_the_planned_noise_is_the_noise_opendp_adds(tmp_path, keys, max_contributions):
    """The plan's standard deviation of a class x field cell is the one OpenDP gives the
    marginals it releases (a person's k rows: sensitivity k), so its choices rest on the
    noise the release really adds."""
    from selpe_audit.schema import demo_schema_path

    priv, pub, _ = keys
    cfg = load_config(None, {"data": DEMO_SAMPLE, "schema": demo_schema_path(),
                             "release_key": priv, "out": tmp_path / "out",
                             "lifetime_ledger": tmp_path / "ledger", "phrases": False,
                             "max_contributions": max_contributions})
    doc = read_release(run_release(cfg).path.parent, [pub]).doc
    planned = doc["budget"]["plan"]["cell_stddev"]
    released = [m["stddev"] for m in doc["counts"]["model"]["marginals"]
                if len(m["clique"]) == 2]
    assert released and all(s == pytest.approx(planned, rel=1e-6) for s in released)
