"""Synthetic people (issue 70): the schema's person structure, the demo's people, the
people tables measured through OpenDP with one flattened row per person, their artifact
block and review section, and decode putting visits together into people."""

from __future__ import annotations

import json
import re

import numpy as np
import polars as pl
import pytest

from audits.people import c2st_people, return_auc, transitions, visits_shares
from decode.pipeline import DecodeSettings, run_decode
from release.config_file import load_config
from release.dp.unit import UNIT_COL
from release.persons import NEXT_COL, VISITS_COL, people_rows
from release.pipeline import run_release
from selpe_audit.artifact.document import schema_validators
from selpe_audit.artifact.persons_block import PersonsBlock
from selpe_audit.artifact.records import json_form, parse
from selpe_audit.artifact.view import ReleaseView
from selpe_audit.demo.generator import PEOPLE_COLUMNS, generate_people, write_rows
from selpe_audit.errors import UserError
from selpe_audit.review.page import render_review_html
from selpe_audit.schema import demo_schema_path, load_schema, parse_schema

PEOPLE_SCHEMA = demo_schema_path(people=True)
CANARY = "ZQX-CANARY-7731"


@pytest.fixture(scope="module")
def schema():
    return load_schema(PEOPLE_SCHEMA)


@pytest.fixture(scope="module")
def people_artifact(tmp_path_factory, keys):
    """A release of 3,000 demo visits of people (one person's id and complaint a canary),
    epsilon 2, the default configuration: the plan runs every people table."""
    tmp = tmp_path_factory.mktemp("people")
    rows = generate_people(3000, seed=3)
    for r in rows:
        if r["patient_id"] == rows[0]["patient_id"]:
            r["patient_id"], r["chief_complaint"] = f"C{CANARY[-4:]}", f"{CANARY} pain"
    data = write_rows(rows, tmp / "visits.csv")
    cfg = load_config(None, {"data": data, "schema": PEOPLE_SCHEMA, "release_key": keys[0][0],
                             "out": tmp / "art", "dataset": "people", "epsilon": 2.0,
                             "lifetime_ledger": tmp / "ledger"})
    result = run_release(cfg)
    return result.path.parent, json.loads(result.path.read_text()), pl.DataFrame(rows)


def _bad(raw: dict, **changes) -> str:
    doc = {**raw, **changes}
    with pytest.raises(UserError) as e:
        parse_schema(doc, source="s.json")
    return str(e.value)


def test_the_schema_says_who_is_who_and_refuses_what_it_cannot_mean(schema):
    s = schema.persons
    assert (s.order, s.person_fields, s.nondecreasing, s.transitions) == (
        "visit_day", ("sex",), ("age",), ("acuity", "disposition"))
    assert s.gap_labels()[0] == "[0, 2)" and s.gap_labels()[-1] == "[91, 729]"
    assert [s.gap_index(g) for g in (0, 1, 2, 30, 31, 729)] == [0, 0, 1, 2, 3, 4]
    raw = json.loads(PEOPLE_SCHEMA.read_text())
    no_id = {k: v for k, v in raw.items() if k != "x-id"}
    assert "needs \"x-id\"" in _bad(no_id)
    assert "x-person-fields names the label" in _bad(raw, **{"x-person-fields": ["acuity"]})
    assert "not a numeric property" in _bad(raw, **{"x-order": "sex"})
    props = json.loads(json.dumps(raw["properties"]))
    props["visit_day"]["x-gap-bins"] = [0, 10, 700]
    assert "from 0 to 729" in _bad(raw, properties=props)
    props["visit_day"]["x-gap-bins"] = [0, 729]
    props["age"]["x-gap-bins"] = [0, 105]
    assert "belongs to the x-order field only" in _bad(raw, properties=props)
    lone = {k: v for k, v in raw.items() if k != "x-order"}
    assert "need \"x-order\"" in _bad(lone)
    # the demo's visit schema has none of it
    assert load_schema(demo_schema_path()).persons is None


def test_the_demo_people_have_histories():
    df = pl.DataFrame(generate_people(3000, seed=1))
    assert df.columns == list(PEOPLE_COLUMNS) and df.height == 3000
    people = df.sort("patient_id", "visit_day").group_by("patient_id", maintain_order=True).agg(
        pl.col("sex").n_unique().alias("sexes"), pl.col("age").diff().min().alias("age_step"),
        pl.len().alias("n"))
    assert people["sexes"].max() == 1
    assert (people["age_step"].drop_nulls() >= 0).all()
    returning = (people["n"] > 1).mean()
    assert 0.15 < returning < 0.35  # about a quarter of people come back
    assert df["visit_day"].min() >= 0 and df["visit_day"].max() <= 729


def test_one_flattened_row_per_person_in_order_with_the_first_step(schema):
    rows = pl.DataFrame([
        {**generate_people(1, seed=0)[0], "patient_id": pid, "visit_day": day, "acuity": a}
        for pid, day, a in [("A", 50, 3), ("A", 10, 1), ("A", 90, 5), ("A", 95, 5),
                            ("B", 7, 2)]])
    people = people_rows(rows, schema, "patient_id", cap=3)
    assert people.height == 2 and people[UNIT_COL].n_unique() == 2
    a, b = people.sort(VISITS_COL, descending=True).to_dicts()
    assert a[VISITS_COL] == 2  # four visits read as "3 or more" (code cap - 1)
    assert a["__key_acuity"] == 0 and a[NEXT_COL] == 2  # first visit acuity 1, next 3
    assert a["__gap"] == schema.persons.gap_index(40)
    assert b[VISITS_COL] == 0 and b[NEXT_COL] == len(schema.classes)  # none
    assert b["__gap"] == len(schema.persons.gap_bins) - 1


def test_the_release_measures_people_through_opendp(people_artifact):
    art, doc, _ = people_artifact
    block = doc["persons"]
    assert block["cap"] == 3 and block["order"] == "visit_day"
    assert set(block["next"]) == {"acuity", "disposition"} and block["gaps"]
    entries = {e["id"]: e for e in doc["ledger"]["entries"]}
    people = [e for i, e in entries.items() if i.startswith("persons/")]
    assert len(people) == 4
    for e in people:  # one row a person: the Laplace scale is 1 / epsilon
        assert "laplace" in e["mechanism"].lower()
        assert e["scale"] == pytest.approx(1 / e["epsilon"], rel=1e-6)
    assert doc["ledger"]["total_epsilon"] <= 2.0 + 1e-9
    assert sum(e["epsilon"] for e in doc["ledger"]["entries"]) == pytest.approx(
        doc["ledger"]["total_epsilon"])
    assert len(block["visits"]["keys"]) == 3 * 3  # sex x visits 1..3
    assert "people tables" in doc["ledger"]["accountant"]
    choices = {c["part"]: c for c in doc["budget"]["plan"]["choices"]}
    assert choices["people: steps (acuity, disposition, gaps)"]["choice"].endswith("each")
    schema_validators().precise.validate(doc)  # the published schema
    assert json_form(parse(PersonsBlock, block)) == block  # one record: writer and reader
    view = ReleaseView.checked(doc)
    assert view.persons.visits.dp_counts == tuple(block["visits"]["dp_counts"])
    broken = json.loads(json.dumps(doc))
    broken["persons"]["visits"]["dp_counts"][0] = 1.5
    with pytest.raises(UserError, match="people"):
        ReleaseView.checked(broken)
    text = (art / "release.json").read_text()
    assert CANARY not in text and "CANARY" not in text


def test_the_review_shows_the_people(people_artifact):
    _, doc, _ = people_artifact
    page = render_review_html(doc)
    assert 'id="people"' in page and "3 or more visits" in page
    assert "visits per person" in page and "Steps: <span class=\"mono\">acuity" in page
    assert CANARY not in page


@pytest.mark.parametrize("decoder", ["model", "marginals"])
def test_decode_writes_people(people_artifact, keys, tmp_path, decoder, schema):
    art, _, real = people_artifact
    out = tmp_path / "people.parquet"
    res = run_decode(art, [keys[0][1]], 0, out, DecodeSettings(n=2000, decoder=decoder, seed=1))
    df = pl.read_parquet(out)
    assert df.height == 2000 and df.columns == schema.field_names
    assert res.provenance_doc["people"]["people"] == df["patient_id"].n_unique()
    assert not set(df["patient_id"]) & set(real["patient_id"])  # fresh ids
    assert df["patient_id"].str.starts_with("S").all()
    by = df.group_by("patient_id").agg(pl.col("sex").n_unique().alias("sexes"),
                                      pl.len().alias("n"))
    assert by["sexes"].max() == 1 and by["n"].max() <= 3
    assert (by["n"] > 1).mean() > 0.1  # people come back
    ordered = df.with_row_index().group_by("patient_id", maintain_order=True).agg(
        pl.col("visit_day").diff().min().alias("day_step"),
        pl.col("age").diff().min().alias("age_step"), pl.col("index").diff().max().alias("gap"))
    assert (ordered["day_step"].drop_nulls() >= 0).all()  # in order
    assert (ordered["age_step"].drop_nulls() >= 0).all()  # age never goes down
    assert (ordered["gap"].drop_nulls() == 1).all()  # a person's visits together
    assert df["visit_day"].is_between(0, 729).all()
    written = out.read_bytes()
    assert CANARY.encode() not in written


def test_people_resemble_the_real_ones(people_artifact, keys, tmp_path, schema):
    """The measures the report and the benchmark read: ours against a random pairing of
    the same visits (the floor)."""
    art, _, real = people_artifact
    out = tmp_path / "people.parquet"
    run_decode(art, [keys[0][1]], 0, out, DecodeSettings(n=3000, decoder="model", seed=2))
    syn = pl.read_parquet(out)
    shuffled = syn.with_columns(pl.Series("patient_id", syn["patient_id"].to_numpy()[
        np.random.default_rng(0).permutation(syn.height)]))
    ours = transitions(syn, real, schema, 3)["mean"]
    floor = transitions(shuffled, real, schema, 3)["mean"]
    assert ours < 0.7 * floor
    assert 0.5 * abs(visits_shares(syn, schema, 3) - visits_shares(real, schema, 3)).sum() < 0.1
    assert return_auc(syn, real, schema, seed=0) > 0.55
    assert c2st_people(syn, real, schema, 3, seed=0) < 0.7


def test_the_row_unit_and_a_small_table_measure_less(tmp_path, keys):
    data = write_rows(generate_people(400, seed=4), tmp_path / "v.csv")
    base = {"data": data, "schema": PEOPLE_SCHEMA, "release_key": keys[0][0],
            "dataset": "small", "epsilon": 2.0, "lifetime_ledger": tmp_path / "ledger"}
    small = run_release(load_config(None, {**base, "out": tmp_path / "a"})).doc
    choices = {c["part"]: c["choice"] for c in small["budget"]["plan"]["choices"]}
    assert choices["people: steps (acuity, disposition, gaps)"] == "skipped"
    assert "next" not in small["persons"] and small["persons"]["visits"]
    rows = run_release(load_config(None, {**base, "out": tmp_path / "b", "unit": "row"})).doc
    assert "persons" not in rows
    assert any(c["part"] == "people tables" and c["choice"] == "skipped"
               for c in rows["budget"]["plan"]["choices"])


def test_a_visit_table_decodes_as_before(counts_artifact, keys, tmp_path):
    out = tmp_path / "visits.parquet"
    res = run_decode(counts_artifact, [keys[0][1]], 0, out,
                     DecodeSettings(n=50, decoder="model", seed=0))
    assert "patient_id" not in pl.read_parquet(out).columns
    assert "people" not in res.provenance_doc


def test_the_visits_cap_is_checked():
    with pytest.raises(UserError, match="visits_cap"):
        load_config(None, {"data": "x.csv", "schema": str(PEOPLE_SCHEMA), "release_key": "k",
                           "dataset": "d", "visits_cap": 1})


@pytest.mark.slow
@pytest.mark.model
def test_the_audit_report_compares_people(people_artifact, keys, tmp_path, schema, models):
    """`audit report` on decoded people: the visits per person side by side, the step heat
    maps, return-visit TSTR, C2ST and the person-level MIA; rendered in a browser where
    one is installed."""
    from selpe_audit.cli.main import main
    from tests.test_review import CHROMIUM, rendered_dom

    art, _, real = people_artifact
    syn = tmp_path / "people.parquet"
    run_decode(art, [keys[0][1]], 0, syn, DecodeSettings(n=1500, decoder="model", seed=3))
    train = tmp_path / "train.parquet"
    real.write_parquet(train)
    test = write_rows(generate_people(1500, seed=9), tmp_path / "test.csv")
    page = tmp_path / "report.html"
    assert main(["audit", "report", "--synthetic", str(syn), "--real-train", str(train),
                 "--real-test", str(test), "--schema", str(PEOPLE_SCHEMA), "--artifact",
                 str(art), "--trust", str(keys[0][1]), "--no-sdmetrics", "--max-targets",
                 "300", "--out", str(page)]) == 0
    people = json.loads(page.with_suffix(".json").read_text())["result"]["people"]
    assert people["cap"] == 3 and len(people["visits"]["real"]) == 3
    assert people["visits_tvd"] < 0.1 and people["tvd"]["mean"] < 0.35
    assert set(people["steps"]) == {"acuity", "disposition"}
    assert 0.5 < people["return_tstr"]["synthetic"] < 0.9
    assert 0.3 < people["mia"]["auc"] < 0.7  # no member stands out
    html = page.read_text()
    assert 'id="people"' in html and "acuity -&gt; next, synthetic" in html
    if CHROMIUM.exists():
        dom = rendered_dom(tmp_path, page, 4000)
        titles = re.findall(r'<svg[^>]*aria-label="([^"]*)"', dom)
        assert sum(t.endswith("next, real") for t in titles) == 2
        assert "visits per person (share of people)" in titles


@pytest.mark.slow
@pytest.mark.model
def test_the_llm_decoder_writes_people_too(people_artifact, keys, tmp_path, llm):
    """The LLM decoder (hybrid on this model-mode artifact: the model's fields, the LLM's
    text): its visits are put together into people like any decoder's."""
    art, _, real = people_artifact
    out = tmp_path / "people.jsonl"
    res = run_decode(art, [keys[0][1]], 0, out, DecodeSettings(n=12, decoder="llm", seed=4))
    df = pl.read_ndjson(out)
    assert df.height == 12 and df["patient_id"].str.starts_with("S").all()
    assert res.provenance_doc["people"]["people"] == df["patient_id"].n_unique()
    assert df.group_by("patient_id").agg(pl.col("sex").n_unique())["sex"].max() == 1
    assert not set(df["patient_id"]) & set(real["patient_id"])


def test_the_terminal_review_prints_every_people_count(people_artifact):
    from rich.console import Console

    from selpe_audit.review.terminal import counts_parts

    _, doc, _ = people_artifact
    console = Console(width=200, record=True)
    for part in counts_parts(ReleaseView.checked(doc)):
        console.print(part)
    text = console.export_text()
    assert "3 or more visits" in text and "persons/next/disposition" in text
    for count in doc["persons"]["gaps"]["dp_counts"]:
        assert str(count) in text


def test_the_bare_structure_orders_people_by_the_label_alone(tmp_path, keys):
    """``x-order`` alone (no person fields, no non-decreasing field, the default transition:
    the label): released and decoded the same way."""
    raw = json.loads(PEOPLE_SCHEMA.read_text())
    for k in ("x-person-fields", "x-nondecreasing", "x-transitions"):
        raw.pop(k)
    bare = tmp_path / "bare.schema.json"
    bare.write_text(json.dumps(raw))
    data = write_rows(generate_people(3000, seed=6), tmp_path / "v.csv")
    cfg = load_config(None, {"data": data, "schema": bare, "release_key": keys[0][0],
                             "out": tmp_path / "art", "dataset": "bare", "epsilon": 2.0,
                             "lifetime_ledger": tmp_path / "ledger"})
    doc = run_release(cfg).doc
    assert doc["persons"]["visits"]["fields"] == ["visits"]
    assert set(doc["persons"]["next"]) == {"acuity"}
    out = tmp_path / "people.parquet"
    run_decode(cfg.out, [keys[0][1]], 0, out, DecodeSettings(n=1000, decoder="model", seed=0))
    df = pl.read_parquet(out)
    assert df.height == 1000 and df["patient_id"].n_unique() < 1000


def test_a_chunked_decode_mixes_every_class_into_each_chunk(people_artifact, keys, tmp_path):
    """People are put together within a chunk, so each chunk holds every class (not the
    visit decode's consecutive slices, which would leave a chunk one or two acuities and
    force most returns onto another label)."""
    from decode.chunks import chunk_plan

    rows = {1: 130, 2: 610, 3: 1200, 4: 800, 5: 260}
    chunks = chunk_plan(rows, 2.0, 1000, mixed=True)
    assert all(sum(ch.rows.values()) <= 1000 for ch in chunks)
    assert all(min(ch.rows.values()) > 0 for ch in chunks)
    assert {c: sum(ch.rows[c] for ch in chunks) for c in rows} == rows
    art, _, _ = people_artifact
    out = tmp_path / "people.parquet"
    res = run_decode(art, [keys[0][1]], 0, out,
                     DecodeSettings(n=3000, decoder="model", seed=5, chunk_rows=1000))
    people = res.provenance_doc["people"]
    assert res.provenance_doc["output"]["chunks"] == 4
    assert people["relabelled"] < 0.05 * (3000 - people["people"])
