"""The typed artifact view and the one cohort predicate: tolerant for review, strict for use."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from selpe_audit.artifact.view import ReleaseView, counts_view
from selpe_audit.demo.generator import generate_rows
from selpe_audit.errors import UserError
from selpe_audit.schema import CohortRule, load_schema

SCHEMA = load_schema("selpe_audit/data/ed_triage.schema.json")
ROWS = generate_rows(300, seed=3)


def _doc(**counts_extra) -> dict:
    """A minimal well-formed document: class balance and one histogram, no selection."""
    classes = SCHEMA.classes
    sex = SCHEMA.field("sex")
    counts = {"signed": True,
              "class_balance": {"mechanism_id": "counts/class_balance", "classes": classes,
                                "dp_counts": [5 * (i + 1) for i in range(len(classes))]},
              "histograms": {"sex": {"mechanism_id": "counts/histogram/sex", "kind": "categories",
                                     "keys": list(sex.enum), "edges": None,
                                     "dp_counts_by_class": [[-2, 3] + [0] * (len(sex.enum) - 2)
                                                            for _ in classes]}},
              **counts_extra}
    return {"schema": SCHEMA.public_json(), "schema_sha256": SCHEMA.sha256(),
            "ledger": {"entries": [{"id": "counts/histogram/sex", "mechanism": "Laplace",
                                    "constructor": "c", "scale": 4.0, "epsilon": 0.5,
                                    "delta": 0.0, "scope": "s", "composition": "c"}],
                       "total_epsilon": 1.0, "total_delta": 0.0, "accountant": "x"},
            "counts": counts, "selection": None}


@settings(max_examples=30, deadline=None)
@given(lo=st.integers(0, 100), width=st.integers(0, 40), sexes=st.sets(
    st.sampled_from(list(SCHEMA.field("sex").enum)), min_size=1))
def test_the_polars_condition_and_contains_agree(lo, width, sexes):
    rule = CohortRule.parse(SCHEMA, {"age": (lo, lo + width), "sex": tuple(sexes)})
    frame = pl.DataFrame(ROWS).select(rule.condition().alias("in"))
    assert frame["in"].to_list() == [rule.contains(r) for r in ROWS]


def test_overlap_and_rule_errors():
    a = CohortRule.parse(SCHEMA, {"age": (0, 29)})
    assert not a.overlaps(CohortRule.parse(SCHEMA, {"age": (30, 40)}))
    assert a.overlaps(CohortRule.parse(SCHEMA, {"age": (29, 40)}))
    assert not a.overlaps(CohortRule.parse(SCHEMA, {"age": (29.5, 40)}))  # integer field
    for where, msg in (({"weight": (0, 1)}, "unknown field"), ({"age": (3,)}, "range"),
                       ({"sex": ("robot",)}, "enum"), ({"chief_complaint": ("x",)}, "free text")):
        with pytest.raises(ValueError, match=msg):
            CohortRule.parse(SCHEMA, where)


def test_class_hints_are_the_largest_signed_count():
    hints = counts_view(_doc()["counts"]).class_hints()
    assert set(hints) == set(SCHEMA.classes)
    assert all(h == {"sex": str(SCHEMA.field("sex").enum[1])} for h in hints.values())


@pytest.mark.parametrize("junk", [None, [], "x", {"counts": [1]}, {"selection": {"rounds": [
    "odd", {"classes": [{"winners": "no", "partners": None}]}]}, "ledger": {"entries": [3]}}])
def test_parse_never_raises(junk):
    view = ReleaseView.parse(junk)
    assert view.counts.histograms == {} and view.ledger.scales() == {}
    list(view.counts.series())
    if view.selection is not None:
        assert list(view.selection.exemplars()) == []


def test_checked_reads_a_good_document_and_keeps_unknown_blocks():
    view = ReleaseView.checked(_doc(future={"a": 1}))
    assert view.schema.name == SCHEMA.name
    assert view.counts.extra == {"future": {"a": 1}}
    assert view.ledger.scales() == {"counts/histogram/sex": 4.0}


@pytest.mark.parametrize("break_it", [
    lambda d: d["counts"]["class_balance"]["dp_counts"].append(1),
    lambda d: d["counts"]["histograms"]["sex"]["dp_counts_by_class"][0].__setitem__(0, 1.5),
    lambda d: d["counts"]["histograms"]["sex"]["keys"].reverse(),
    lambda d: d["counts"].update(cohorts={"mechanism_id": "c", "cohorts": [
        {"name": "a", "where": {"age": [1]}, "dp_counts_by_class": [0] * len(SCHEMA.classes)},
        {"name": "(other)", "where": "rest", "dp_counts_by_class": [0] * len(SCHEMA.classes)}]}),
])
def test_checked_refuses_a_malformed_block_in_one_line(break_it):
    doc = _doc()
    break_it(doc)
    with pytest.raises(UserError, match="malformed") as e:
        ReleaseView.checked(doc)
    assert "\n" not in str(e.value)


def test_cohort_membership_uses_the_rule_and_falls_back_to_the_catch_all():
    n = len(SCHEMA.classes)
    view = ReleaseView.checked(_doc(cohorts={"mechanism_id": "c", "classes": SCHEMA.classes,
                                             "cohorts": [
        {"name": "young", "where": {"age": [0, 17]}, "dp_counts_by_class": [1] * n},
        {"name": "(other)", "where": "rows in no other cohort",
         "dp_counts_by_class": [1] * n}]}))
    assert view.counts.cohorts is not None
    assert [view.counts.cohort_of(r) for r in ROWS] == [0 if r["age"] <= 17 else 1 for r in ROWS]
