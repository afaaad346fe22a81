"""``audit report``: its statistics, its page in a real browser, and the demo's ending."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from audits import report, stats
from audits.report_charts import Curve, heatmap, paired_bars, roc_chart
from selpe_audit.cli.main import main
from selpe_audit.demo.generator import generate_rows, write_rows
from tests.test_audits import write_synthetic
from tests.test_review import needs_chromium, rendered_dom

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


# ----- statistics ----------------------------------------------------------------------------

def test_cramers_v_is_zero_for_independent_one_for_determined_and_none_for_constant():
    rng = random.Random(0)
    a = [rng.choice("abc") for _ in range(6000)]
    b = [rng.choice("xy") for _ in range(6000)]
    assert report.cramers_v(a, b) < 0.05
    assert report.cramers_v(a, a) == pytest.approx(1.0)
    assert report.cramers_v(a, ["z"] * len(a)) is None


def test_roc_points_keep_the_ends_and_the_low_fpr_detail():
    rng = np.random.default_rng(0)
    pos, neg = rng.normal(0.5, 1, 5000), rng.normal(0, 1, 5000)
    roc = stats.roc_points(pos, neg, max_points=100)
    assert len(roc["fpr"]) <= 101
    assert roc["fpr"][0] == 0.0 and roc["fpr"][-1] == 1.0 and roc["tpr"][-1] == 1.0
    assert np.all(np.diff(roc["fpr"]) >= 0)
    assert sum(f < 0.01 for f in roc["fpr"]) >= 20  # geometric spacing: detail at low FPR


def test_field_distributions_put_the_worst_field_first(demo_schema):
    from audits.io import record_schema

    schema = record_schema(demo_schema)
    real = generate_rows(300, 1)
    syn = [dict(r, sex="other") for r in generate_rows(300, 2)]  # one field badly wrong
    for rows in (real, syn):
        for r in rows:
            r.pop("patient_id")
    cats_real, basis = report.categorise(schema, real, None, None)
    cats_syn, _ = report.categorise(schema, syn, None, None)
    fields = report.field_distributions(schema, cats_real, cats_syn, basis)
    assert fields[0]["field"] == "sex" and fields[0]["tvd"] > 0.9
    sex = {c["category"]: c for c in fields[0]["categories"]}
    assert list(sex) == ["female", "male", "other"]  # the schema's order
    assert sex["other"]["synthetic"] == 1.0
    text = next(f for f in fields if f["field"] == "chief_complaint")
    assert text["basis"].startswith("coarse proxy")  # no artifact: word counts


def test_charts_escape_every_label():
    svgs = [paired_bars(HOSTILE, [HOSTILE], [0.5], [0.2]),
            heatmap(HOSTILE, [HOSTILE, "b"], [[None, 0.3], [0.3, None]]),
            roc_chart(HOSTILE, [Curve(HOSTILE, [0, 1], [0, 1], "c0")], log=True)]
    for svg in svgs:
        assert "<script" not in svg and "<img" not in svg and "&lt;script&gt;" in svg


# ----- the command and its page ---------------------------------------------------------------

def _hostile_files(d: Path) -> dict[str, Path]:
    """A text-free dataset whose categorical field holds a value crafted as HTML."""
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema", "title": "hostile",
        "type": "object", "x-label": "y", "required": ["age", "kind", "y"],
        "additionalProperties": False,
        "properties": {
            "age": {"type": "integer", "minimum": 0, "maximum": 99, "x-bins": [0, 30, 60, 99]},
            "kind": {"type": "string", "enum": ["plain", HOSTILE]},
            "y": {"type": "integer", "enum": [0, 1]},
        },
    }
    (d / "schema.json").write_text(json.dumps(schema))
    rng = random.Random(3)

    def rows(n: int) -> pl.DataFrame:
        kind = [rng.choice(["plain", HOSTILE]) for _ in range(n)]
        age = [rng.randrange(100) for _ in range(n)]
        y = [int((k == HOSTILE) ^ (rng.random() < 0.2)) for k in kind]
        return pl.DataFrame({"age": age, "kind": kind, "y": y})

    for name, n in (("train", 400), ("test", 300), ("syn", 300)):
        rows(n).write_csv(d / f"{name}.csv")
    return {k: d / f"{k}.csv" for k in ("train", "test", "syn")} | {"schema": d / "schema.json"}


@pytest.mark.model
@pytest.mark.slow
def test_report_page_escapes_a_crafted_value_and_writes_its_numbers(tmp_path, capsys,
                                                                    monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # the table's rows on one line each
    f = _hostile_files(tmp_path)
    page = tmp_path / "out" / "report.html"
    rc = main(["audit", "report", "--synthetic", str(f["syn"]), "--real-train", str(f["train"]),
               "--real-test", str(f["test"]), "--schema", str(f["schema"]),
               "--out", str(page)])
    assert rc == 0
    out = capsys.readouterr().out
    assert "TSTR hgb_native" in out and str(page) in out.replace("\n", "")  # a long path wraps
    html = page.read_text()
    assert "<script" not in html.lower() and "<img" not in html.lower()
    assert html.count("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;") >= 2
    assert "Content-Security-Policy" in html and "not differentially private" in html
    doc = json.loads(page.with_suffix(".json").read_text())
    r = doc["result"]
    kind = next(x for x in r["fields"] if x["field"] == "kind")
    assert [c["category"] for c in kind["categories"]] == ["plain", HOSTILE]
    i, j = r["associations"]["fields"].index("kind"), r["associations"]["fields"].index("y")
    assert r["associations"]["real"][i][j] > 0.5  # y follows kind in these rows
    assert r["utility"]["models"]["hgb_native"]["real_sample"]["macro_auc"] > 0.75
    assert set(r["mia"]["attacks"]) == {"kernel", "tfidf"} and "dp_bound" not in r["mia"]
    sd = r["sdmetrics"]
    if sd["status"] == "ok":  # DEV installs carry the [report] extra
        assert 0 < sd["score"] <= 1 and {c["field"] for c in sd["column_shapes"]} == {
            "age", "kind", "y"}


def test_report_needs_an_html_path_and_stays_out_of_artifacts(tmp_path, capsys):
    f = _hostile_files(tmp_path)
    base = ["audit", "report", "--synthetic", str(f["syn"]), "--real-train", str(f["train"]),
            "--real-test", str(f["test"]), "--schema", str(f["schema"])]
    assert main([*base, "--out", str(tmp_path / "report.json")]) == 2
    assert "give an .html file" in capsys.readouterr().err
    art = tmp_path / "art"
    art.mkdir()
    (art / "release.json").write_text("{}")
    assert main([*base, "--out", str(art / "report.html")]) == 2
    err = capsys.readouterr().err
    assert "refusing to write an audit report into the artifact folder" in err
    assert err.count("\n") == 1 and sorted(p.name for p in art.iterdir()) == ["release.json"]


@pytest.mark.slow
@pytest.mark.model
@needs_chromium
def test_demo_report_in_headless_chromium(tmp_path, demo_schema_path_, models):
    """The demo's data with text (the embedder runs): the page renders, is not blank, and
    holds every plot: a bar chart per field, three heat maps, two ROC charts."""
    members = write_rows(generate_rows(300, 21), tmp_path / "members.csv")
    test = write_rows(generate_rows(200, 22), tmp_path / "test.csv")
    syn = write_synthetic(generate_rows(200, 23), tmp_path / "syn.csv")
    page = tmp_path / "report.html"
    assert main(["audit", "report", "--synthetic", str(syn), "--real-train", str(members),
                 "--real-test", str(test), "--schema", str(demo_schema_path_), "--out",
                 str(page)]) == 0
    dom = rendered_dom(tmp_path, page, 4000)
    n_fields = len(json.loads(page.with_suffix(".json").read_text())["result"]["fields"])
    titles = re.findall(r'<svg[^>]*aria-label="([^"]*)"', dom)
    assert sum(t.endswith("real and synthetic shares") for t in titles) == n_fields == 13
    assert sum(t.startswith("Cramér's V") for t in titles) == 3
    assert sum(t.startswith("membership inference ROC") for t in titles) == 2
    assert "<polyline" in dom and "Free text" in dom and "<script" not in dom.lower()
