"""One artifact model: the typed records are what the release writes, what readers parse,
and where the artifact's JSON Schema comes from (issue 34, item 2).

A real fixed-mode release through OpenDP (the review-model test's tiny schema with a free
text field, a hash embedder standing in for the sentence model).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import fastjsonschema
import pytest
from jsonschema import Draft202012Validator
from test_review_model import model_release_doc

from selpe_audit.artifact import model_block, records
from selpe_audit.artifact.document import ReleaseDocument, artifact_json_schema
from selpe_audit.artifact.view import ReleaseView


@pytest.fixture(scope="module")
def doc(tmp_path_factory) -> dict:
    return model_release_doc(tmp_path_factory.mktemp("records"), "fixed")


def _plain(x: Any) -> Any:
    return json.loads(json.dumps(x))


def test_the_schema_is_generated_from_the_records():
    defs = artifact_json_schema()["$defs"]
    for cls in (records.LedgerEntry, records.Ledger, records.Budget, records.LifetimeStamp,
                records.UnitRecord, records.Source, records.Guarantees, records.SelectionGdp,
                records.SelectionAccounting, model_block.CountsModel, model_block.ModelColumn,
                model_block.ModelMarginal, model_block.Topics):
        own = {k: v for k, v in records.schema_of(cls).items() if k != "$defs"}
        assert defs[cls.__name__] == own


@pytest.mark.slow
@pytest.mark.parametrize(("path", "cls"), [
    (("ledger",), records.Ledger), (("budget",), records.Budget),
    (("privacy_unit",), records.UnitRecord), (("guarantees",), records.Guarantees),
    (("source",), records.Source), (("counts", "model"), model_block.CountsModel)])
def test_each_block_written_is_its_records_json_form(doc, path, cls):
    """What the release wrote reads back as the record and writes out the same: the writer
    and the reader share one definition."""
    raw = doc
    for key in path:
        raw = raw[key]
    rec = records.parse(cls, raw)
    assert rec is not None
    assert _plain(records.json_form(rec)) == _plain(raw)


def test_the_document_parses_whole_and_the_view_reads_the_records(doc):
    whole = records.parse(ReleaseDocument, doc)
    assert whole is not None and whole.counts.model is not None
    view = ReleaseView.checked(doc)
    assert view.ledger == whole.ledger and view.guarantees == whole.guarantees
    assert view.counts.model == whole.counts.model
    assert set(view.counts.topics) == set(whole.counts.topics or {}) == {"c"}


def _set(d: dict, path: tuple, value: Any) -> None:
    for key in path[:-1]:
        d = d[key]
    d[path[-1]] = value


@pytest.mark.parametrize(("path", "value", "ok"), [
    (("ledger", "entries", 0, "epsilon"), -1.0, False),
    (("budget", "delta"), 2.0, False),
    (("privacy_unit", "unit"), "family", False),
    (("counts", "model", "measure"), "pure", False),
    (("counts", "topics", "c", "k"), 0, False),
    (("source", "path"), "/enclave/rows.csv", False),  # no location ever
    (("release_key_id",), "not-hex", False),
    (("extra_block",), {}, False),  # nothing but format 1's blocks at the top
    (("counts", "mode"), "a-plugins-mode", True),  # any mode name reads off-site
    (("counts", "mode_description", "future"), 1, True),  # later additions are read past
    (("selection",), {"mode": "a-plugins-mode", "mode_description": {"accounting": "zCDP"}},
     True),
])
def test_the_published_schema_and_the_records_agree(doc, path, value, ok):
    bad = copy.deepcopy(doc)
    _set(bad, path, value)
    schema = artifact_json_schema()
    by_schema = Draft202012Validator(schema).is_valid(bad)
    try:  # the fast path of check_release_document
        fastjsonschema.compile(schema, use_default=False)(bad)
        by_fast = True
    except fastjsonschema.JsonSchemaException:
        by_fast = False
    by_records = records.parse(ReleaseDocument, bad) is not None
    assert by_schema == by_fast == by_records == ok
