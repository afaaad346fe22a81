"""Reading private files: every bad-input case is one line naming file/row/field, no value."""

from __future__ import annotations

import json

import polars as pl
import pytest
from conftest import good_row
from hypothesis import given, settings
from hypothesis import strategies as st

from release.private_data import read_private_rows
from selpe_audit.errors import UserError

CANARY_TEXT = "CANARY-7f3a-unique-complaint"


def _csv(tmp_path, rows, name="d.csv"):
    p = tmp_path / name
    pl.DataFrame(rows).write_csv(p)
    return p


@pytest.mark.parametrize("fmt", ["csv", "parquet", "jsonl"])
def test_reads_all_formats(tmp_path, demo_schema, fmt):
    rows = [good_row(i) for i in range(5)]
    p = tmp_path / f"d.{fmt}"
    df = pl.DataFrame(rows)
    {"csv": df.write_csv, "parquet": df.write_parquet, "jsonl": df.write_ndjson}[fmt](p)
    table = read_private_rows(p, demo_schema)
    assert table.priv_rows == rows
    assert not table.problems


def _err(path, schema, **kw) -> str:
    with pytest.raises(UserError) as e:
        read_private_rows(path, schema, **kw)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg
    return msg


def test_missing_and_empty_files(tmp_path, demo_schema):
    assert "not found" in _err(tmp_path / "nope.csv", demo_schema)
    empty = tmp_path / "e.csv"
    empty.write_text("")
    assert "empty" in _err(empty, demo_schema)
    header_only = tmp_path / "h.csv"
    header_only.write_text(",".join(demo_schema.field_names) + "\n")
    assert "no data rows" in _err(header_only, demo_schema)
    assert "unknown data format" in _err(tmp_path / "d.xlsx", demo_schema)


def test_missing_column(tmp_path, demo_schema):
    rows = [{k: v for k, v in good_row().items() if k != "heart_rate"}]
    assert "missing column 'heart_rate'" in _err(_csv(tmp_path, rows), demo_schema)


@pytest.mark.parametrize("bad", [b"sore thr\xff\xfet", b'"sore, thr\xc3"'])
def test_non_utf8(tmp_path, demo_schema, bad):
    p = _csv(tmp_path, [good_row(1), good_row(2), good_row(3)])
    lines = p.read_bytes().split(b"\n")
    lines[2] = lines[2].replace(b"sore throat", bad)
    p.write_bytes(b"\n".join(lines))
    msg = _err(p, demo_schema)
    assert "line 3 is not valid UTF-8" in msg


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("heart_rate", "fast", "expected an integer"),
        ("heart_rate", "88.5", "fraction"),
        ("heart_rate", "999", "above the maximum 200"),
        ("temperature_c", "NaN", "NaN or infinite"),
        ("temperature_c", "inf", "NaN or infinite"),
        ("chief_complaint", CANARY_TEXT * 10, "longer than maxLength 120"),
        ("sex", "CANARY-sex-value", "not one of the allowed categories"),
        ("age", "", "missing value"),
    ],
)
def test_bad_values_name_row_and_field_not_value(tmp_path, demo_schema, field, value, reason):
    rows = [{k: str(v) for k, v in good_row(i).items()} for i in range(3)]
    rows[1][field] = value
    p = _csv(tmp_path, rows)
    msg = _err(p, demo_schema)
    assert f"row 2, field '{field}'" in msg
    assert reason in msg
    assert "--invalid-rows drop" in msg
    if len(value) > 4:
        assert value not in msg and "CANARY" not in msg


def test_drop_policy_keeps_valid_rows_and_reports(tmp_path, demo_schema):
    rows = [{k: str(v) for k, v in good_row(i).items()} for i in range(4)]
    rows[0]["o2_saturation"] = "12"
    rows[3]["chief_complaint"] = CANARY_TEXT * 10
    table = read_private_rows(_csv(tmp_path, rows), demo_schema, invalid="drop")
    assert len(table.priv_rows) == 2
    assert table.dropped_rows == 2
    assert [(p.row, p.field) for p in table.problems] == [(1, "o2_saturation"),
                                                          (4, "chief_complaint")]
    assert CANARY_TEXT not in json.dumps([p.__dict__ for p in table.problems])


def test_jsonl_wrong_type(tmp_path, demo_schema):
    bad = good_row()
    bad["chief_complaint"] = 42
    p = tmp_path / "d.jsonl"
    p.write_text(json.dumps(good_row()) + "\n" + json.dumps(bad) + "\n")
    assert "expected text" in _err(p, demo_schema)


def test_malformed_csv_does_not_quote_content(tmp_path, demo_schema):
    p = tmp_path / "d.csv"
    header = ",".join(demo_schema.field_names)
    p.write_text(header + '\n"CANARY-unterminated,1,2\nx,y\n')
    msg = _err(p, demo_schema)
    assert "CANARY" not in msg


def test_extra_columns_are_ignored_and_reported(tmp_path, demo_schema):
    rows = [dict(good_row(), mrn="M1")]
    table = read_private_rows(_csv(tmp_path, rows), demo_schema)
    assert table.ignored_columns == ["mrn"]
    assert "mrn" not in table.priv_rows[0]


_TRICKY = {  # cells whose form the columnar check must either coerce exactly or hand back
    "age": ["42", " 42 ", "42.0", "+7", "-0", "1_0", "4.5", "1e1", "106", "-1", "", " ",
            "nan", "inf", "\x1c", "٣", "99999999999999999999", "0x1f", "3.", ".5e1", "007",
            "-0.0", "Infinity", "\t9\t", "4e1", "9007199254740993"],
    "temperature_c": ["37", "37.25", " 36.6", "3.7e1", "1e400", "nan", "-inf", "41.9999",
                      "42.0000001", "34", "abc", "", "36,6", "0.37E+2", "1_2.5", "+.37e2", "NaN",
                      "037.0", "\uff13\uff17"],
    "sex": ["female", " female", "FEMALE", "", " ", "\x1c", "other"],
    "patient_id": ["P1", "", " ", "\x1c", "\x1c\x1d", "x" * 16, "x" * 17, "\u3000", "é"],
    "chief_complaint": ["ok!", "ab", "", "   ", "x" * 120, "x" * 121, "é" * 120, "\x1c\x1c\x1c"],
    "acuity": ["1", "5", "6", "0", "1.0", "2.5", " 3", "three"],
}


@settings(max_examples=400, deadline=None)
@given(st.lists(st.text(alphabet="0123456789+-._eE xinfatyINFATY\u0663\uff13\x1c\t", max_size=8),
                min_size=1, max_size=20))
def test_polars_parses_a_subset_of_what_python_parses_to_the_same_values(cells):
    """The columnar check trusts polars' casts where they succeed: each such cell must be
    one Python's int()/float() take, with the same value (bitwise for floats)."""
    stripped = pl.Series(cells, dtype=pl.String).str.strip_chars()
    for dtype, parse in ((pl.Int64, int), (pl.Float64, float)):
        for cell, got in zip(cells, stripped.cast(dtype, strict=False).to_list(), strict=True):
            if got is not None:
                want = parse(cell.strip())
                assert repr(got) == repr(want) and type(got) is type(want), cell


def _per_row_only(monkeypatch):
    monkeypatch.setattr("release.private_data.coerce_plain", lambda frame, schema: None)


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_the_columnar_check_agrees_with_the_per_row_path_cell_for_cell(
        tmp_path, demo_schema, monkeypatch, fmt):
    """Every tricky cell, one per row, read both ways: the same rows kept with the same
    coerced values (types included) and the same problems reported; parquet also with
    typed columns (nulls, NaN, fractions in an integer field)."""
    rows = []
    for name, cells in _TRICKY.items():
        for cell in cells:
            row = {k: str(v) for k, v in good_row(len(rows)).items()}
            row[name] = cell
            rows.append(row)
    frame = pl.DataFrame(rows, schema={k: pl.String for k in rows[0]})
    if fmt == "parquet":
        typed = frame.with_columns(
            heart_rate=pl.Series([80, None, 31, 200, 201, 90] * (len(rows) // 6)
                                 + [70] * (len(rows) % 6), dtype=pl.Int64),
            o2_saturation=pl.Series([99.0, 98.5, float("nan"), None, 100.0, 70.0]
                                    * (len(rows) // 6) + [90.0] * (len(rows) % 6)))
        frame = typed
    p = tmp_path / f"tricky.{fmt}"
    frame.write_csv(p) if fmt == "csv" else frame.write_parquet(p)
    both = read_private_rows(p, demo_schema, invalid="drop")
    _per_row_only(monkeypatch)
    reference = read_private_rows(p, demo_schema, invalid="drop")
    assert both.priv_rows == reference.priv_rows
    assert [[type(v) for v in r.values()] for r in both.priv_rows] == [
        [type(v) for v in r.values()] for r in reference.priv_rows]
    assert both.problems == reference.problems and both.dropped_rows == reference.dropped_rows
    assert 0 < both.dropped_rows < len(rows)
    for table in (both, reference):  # the typed frame holds the same rows, in order
        assert table.frame.to_dicts() == table.priv_rows
