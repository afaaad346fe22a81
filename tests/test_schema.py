"""Schema loading, classification, lexicalization and the checks on the schema itself."""

from __future__ import annotations

import copy
import json

import pytest

from selpe_audit.errors import UserError
from selpe_audit.schema import load_schema, parse_schema


def test_demo_schema_classifies_fields(demo_schema):
    assert demo_schema.label == "acuity"
    assert demo_schema.id_field == "patient_id"
    assert demo_schema.classes == [1, 2, 3, 4, 5]
    kinds = {f.name: f.kind for f in demo_schema.fields}
    assert kinds["heart_rate"] == "numeric"
    assert kinds["arrival_mode"] == "categorical"
    assert kinds["chief_complaint"] == "text"
    assert kinds["patient_id"] == "id"
    assert "patient_id" not in [f.name for f in demo_schema.record_fields]


def test_field_order_is_schema_order_and_survives_canonical_form(demo_schema):
    order = demo_schema.field_names
    assert order[0] == "patient_id" and order[-1] == "acuity"
    again = parse_schema(json.loads(json.dumps(demo_schema.public_json(), sort_keys=True)))
    assert again.field_names == order
    assert again.sha256() == demo_schema.sha256()


def test_bins_cover_domain_and_index(demo_schema):
    hr = demo_schema.field("heart_rate")
    assert hr.bins[0] == hr.minimum and hr.bins[-1] == hr.maximum
    assert hr.bin_index(30) == 0
    assert hr.bin_index(59) == 0
    assert hr.bin_index(60) == 1
    assert hr.bin_index(200) == len(hr.bins) - 2  # last bin is closed
    assert hr.bin_labels()[-1] == "[140, 200]"


def test_lexicalize_and_linearize(demo_schema):
    from conftest import good_row

    row = good_row()
    assert demo_schema.lexicalize("heart_rate", 88) == "heart rate in beats per minute: 88"
    assert demo_schema.lexicalize("temperature_c", 37.1) == "temperature in degrees Celsius: 37.1"
    text = demo_schema.linearize(row)
    assert text.startswith("age in years: 44; sex: female")
    assert "P000001" not in text  # the person id is never part of a record


def _mutate(demo_schema, fn):
    raw = copy.deepcopy(demo_schema.raw)
    fn(raw)
    return raw


@pytest.mark.parametrize(
    ("mutation", "needle"),
    [
        (lambda r: r.pop("x-label"), "x-label"),
        (lambda r: r.update({"x-label": "nope"}), "not a property"),
        (lambda r: r.update({"x-label": "age"}), "categorical"),
        (lambda r: r["properties"]["age"].pop("maximum"), "minimum and maximum"),
        (lambda r: r["properties"]["age"].update({"x-bins": [0, 50, 40, 105]}), "increasing"),
        (lambda r: r["properties"]["age"].update({"x-bins": [1, 50, 105]}), "start at minimum"),
        (lambda r: r["properties"]["chief_complaint"].pop("maxLength"), "maxLength"),
        (lambda r: r["properties"]["sex"].update({"pattern": "x"}), "unsupported keyword"),
        (lambda r: r["properties"]["age"].update({"type": "boolean"}), "unsupported type"),
        (lambda r: r.update({"oneOf": [{"type": "object"}]}), "top-level keyword"),
        (lambda r: r.update({"additionalProperties": True}), "additionalProperties"),
        (lambda r: r["required"].remove("age"), "required"),
        (lambda r: r["properties"]["sex"].update({"enum": ["a", "a"]}), "distinct"),
        (lambda r: r["properties"]["age"].update({"minimum": "zero"}), "valid JSON Schema"),
        (lambda r: r["properties"]["sex"].update({"examples": ["female"]}), "free-text"),
        (lambda r: r["properties"]["chief_complaint"].update({"examples": "cough"}),
         "examples: 'cough' is not of type 'array'"),
        (lambda r: r["properties"]["chief_complaint"].update({"examples": ["cough"] * 101}),
         "list of at most 100"),
        (lambda r: r["properties"]["chief_complaint"].update({"examples": ["ok", "  "]}),
         "examples[0] must be a non-blank text of 3 to 120"),
    ],
)
def test_bad_schemas_are_named(demo_schema, mutation, needle):
    with pytest.raises(UserError) as e:
        parse_schema(_mutate(demo_schema, mutation), source="s.json")
    assert needle in str(e.value)
    assert str(e.value).startswith("s.json:")
    assert "\n" not in str(e.value)


def test_default_bins_when_absent(demo_schema):
    raw = _mutate(demo_schema, lambda r: r["properties"]["age"].pop("x-bins"))
    age = parse_schema(raw).field("age")
    assert len(age.bins) == 11 and age.bins[0] == 0 and age.bins[-1] == 105


def test_load_schema_file_errors(tmp_path):
    with pytest.raises(UserError, match="not found"):
        load_schema(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON"):
        load_schema(bad)


def test_free_text_examples_are_public_prompt_material(demo_schema):
    cc = demo_schema.field("chief_complaint")
    assert len(cc.examples) >= 8 and all(3 <= len(t) <= 120 for t in cc.examples)
    raw = _mutate(demo_schema, lambda r: r["properties"]["chief_complaint"].update(
        {"examples": ["a  cough ", "a cough", "rash"]}))
    assert parse_schema(raw).field("chief_complaint").examples == ("a cough", "rash")
    assert demo_schema.record_validator().is_valid(  # an annotation: validation unchanged
        {**{f.name: f.enum[0] for f in demo_schema.by_kind("categorical")},
         **{f.name: f.minimum for f in demo_schema.by_kind("numeric")},
         "chief_complaint": "not one of the examples"})


def test_fast_record_check_agrees_with_jsonschema_on_edge_values(demo_schema):
    """The decode checks millions of records with `record_check`: it must say exactly what
    the jsonschema validator says, for every field and every kind of wrong value."""
    validator, is_valid = demo_schema.record_validator(), demo_schema.record_check()
    base = {f.name: (f.enum[0] if f.kind == "categorical" else
                     f.minimum if f.kind == "numeric" else "a" * max(1, f.min_length))
            for f in demo_schema.record_fields}
    assert validator.is_valid(base) and is_valid(base)
    odd = [True, False, 1.0, 3.5, -1, 0, 10**30, 2**63, float("nan"), float("inf"), "5", "",
           "x" * 5000, None, [], {}]
    checked = disagree = 0
    for f in demo_schema.record_fields:
        values = odd + [v.upper() if isinstance(v, str) else str(v) for v in f.enum]
        if f.kind == "numeric":
            values += [f.minimum - 1, f.maximum + 1, f.minimum - 1e-9, f.maximum]
        for v in [*values, ...]:
            rec = dict(base)
            if v is ...:
                del rec[f.name]
            else:
                rec[f.name] = v
            checked += 1
            disagree += validator.is_valid(rec) != is_valid(rec)
    extra = dict(base, extra_field=1)
    assert not validator.is_valid(extra) and not is_valid(extra)
    assert checked > 200 and disagree == 0

