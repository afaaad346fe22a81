"""The review shows a model-mode artifact's counts model and topic codebooks typed.

Real releases through OpenDP (the tiny schema of test_counts_modes plus a free-text field);
only the sentence embedder is a hash stand-in, so the topic codebook needs no model weights.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from rich.console import Console
from test_counts_modes import TINY_SCHEMA
from test_topics import HashEncoder

from release.config_file import load_config
from release.pipeline import run_release
from selpe_audit.artifact.view import ReleaseView
from selpe_audit.models import Models
from selpe_audit.review.page import render_review_html
from selpe_audit.review.terminal import counts_parts
from selpe_audit.review.view import NULL_CELL, marginal_title

TEXTS = ["chest pain at rest", "twisted ankle", "sore throat", "itchy rash", "headache",
         "cough for a week"]  # fictional, public: they make the candidate pool
SCHEMA = {**TINY_SCHEMA, "properties": {
    **TINY_SCHEMA["properties"],
    "c": {"type": "string", "minLength": 3, "maxLength": 60, "description": "a free text"}},
    "required": [*TINY_SCHEMA["required"], "c"]}


class _Embedder(HashEncoder):
    """The release's embedder, without weights: hash vectors, one text at a time for rows."""

    def private_view(self) -> _Embedder:
        return self

    def clear_cache(self) -> None:
        """Hash vectors keep no cache."""


class _HashModels(Models):
    """The release's models with `_Embedder` for the embedder (no LLM is asked for)."""

    def embedder(self, model=None) -> _Embedder:
        return _Embedder()


def model_release_doc(tmp: Path, mode: str) -> dict:
    """The release.json of a small table released in counts mode ``mode``."""
    rng = np.random.default_rng(0)  # the data's choice only
    y = rng.integers(0, 2, 200)
    rows = {"y": np.array(["a", "b"])[y], "u": np.array(["p", "q", "r"])[(y + rng.integers(
        0, 2, 200)) % 3], "v": np.array(["s", "t"])[rng.integers(0, 2, 200)],
        "w": rng.integers(0, 10, 200), "c": np.array(TEXTS)[rng.integers(0, len(TEXTS), 200)]}
    pl.DataFrame(rows).write_csv(tmp / "rows.csv")
    (tmp / "schema.json").write_text(json.dumps(SCHEMA))
    (tmp / "pool.jsonl").write_text("".join(
        json.dumps({"y": "ab"[i % 2], "u": "p", "v": "s", "w": 3, "c": t}) + "\n"
        for i, t in enumerate(TEXTS)))
    from selpe_audit.artifact.signing import generate_keypair

    priv, _, _ = generate_keypair(tmp / "keys" / "release.pem")
    cfg = load_config(None, {
        "data": tmp / "rows.csv", "schema": tmp / "schema.json", "release_key": priv,
        "out": tmp / "out", "lifetime_ledger": tmp / "ledger", "enclave_log": tmp / "log",
        "epsilon": 2.0, "counts_share": 1.0, "selection_share": 0.0, "counts_mode": mode,
        "candidates": tmp / "pool.jsonl", "topics": 3})
    return run_release(cfg, Console(file=io.StringIO()), _HashModels()).doc


@pytest.fixture(scope="module")
def fixed_doc(tmp_path_factory) -> dict:
    return model_release_doc(tmp_path_factory.mktemp("fixed"), "fixed")


def _terminal(doc: dict) -> str:
    con = Console(file=io.StringIO(), width=160, record=True, highlight=False)
    for part in counts_parts(ReleaseView.parse(doc)):
        con.print(part)
    return con.export_text()


def test_the_counts_model_and_topics_are_shown_typed(fixed_doc):
    counts = fixed_doc["counts"]
    model, topics = ReleaseView.parse(fixed_doc).counts.model, counts["topics"]["c"]
    assert model is not None and "topic:c" in [c.name for c in model.columns]
    for text in (_terminal(fixed_doc), render_review_html(fixed_doc)):
        assert "counts model" in text.lower() and "zero-concentrated" in text
        assert "mirror_descent" in text and NULL_CELL in text
        for m in model.marginals:
            assert marginal_title(m) in text, m.clique
        assert "y a" in text and "y b" in text  # class columns of the by-class tables
        assert "topics of" in text.lower() and "texts considered" in text
        for a in topics["anchors"]:
            assert a["text"] in text
        assert '"marginals"' not in text and '"anchors"' not in text  # not again as raw JSON


def test_every_count_of_a_by_class_marginal_is_in_its_table(fixed_doc):
    view = ReleaseView.parse(fixed_doc)
    assert view.counts.model is not None
    m = next(m for m in view.counts.model.marginals if m.clique == ("y", "u"))
    out = _terminal(fixed_doc)
    table = out[out.index(marginal_title(m)):].split("└")[0]  # up to the table's bottom
    rows = [line for line in table.splitlines() if line.startswith("│")]
    assert [r.split("│")[1].strip() for r in rows] == ["p", "q", "r", NULL_CELL]
    # row-major over (y, u): row i of class column j holds values[j * 4 + i]
    shown = [[int(c.split()[-1]) for c in r.split("│")[2:5]] for r in rows]
    assert shown == [[m.values[j * 4 + i] for j in range(3)] for i in range(4)]


def test_the_html_lists_topic_members_in_details(fixed_doc):
    page = render_review_html(fixed_doc)
    assert '<section id="model">' in page and '<section id="topics">' in page
    for a in fixed_doc["counts"]["topics"]["c"]["anchors"]:
        assert f"{len(a['members'])} member texts</summary>" in page


def test_other_unknown_blocks_still_show_raw(fixed_doc):
    doc = json.loads(json.dumps(fixed_doc))
    doc["counts"]["future_block"] = {"dp_counts": [1, 2]}
    assert "future_block" in _terminal(doc)
    assert '<h4 class="mono">future_block</h4>' in render_review_html(doc)


def test_a_marginals_mode_artifact_has_no_counts_model_part(tmp_path):
    doc = model_release_doc(tmp_path, "marginals")
    assert doc["counts"]["mode"] == "marginals" and "model" not in doc["counts"]
    for text in (_terminal(doc), render_review_html(doc)):
        assert "counts model" not in text.lower() and NULL_CELL not in text
        assert "marginals" in text  # its mode still shows as an other released value


def test_a_marginal_without_the_class_lists_its_cells_capped_in_the_terminal(fixed_doc):
    doc = json.loads(json.dumps(fixed_doc))  # a 5-way marginal, as a later algorithm might
    clique = ["y", "u", "v", "w", "topic:c"]  # 3 * 4 * 3 * 3 * 4 = 432 cells
    doc["counts"]["model"]["marginals"].append(
        {"clique": clique, "stddev": 2.5, "values": list(range(-3, 429))})
    out = _terminal(doc)
    assert "marginal (y, u, v, w, topic:c) · noise stddev 2.5 · 432 cells (the first 200" in out
    assert "│ 196 " in out and "│ 197 " not in out  # counts -3..196 shown, then cut
    page = render_review_html(doc)
    assert "<summary>432 cells</summary>" in page and ">428</span>" in page
