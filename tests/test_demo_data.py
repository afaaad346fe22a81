"""Tests for the fictional ED-triage demo generator (schema validity, realism, determinism)."""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from selpe_audit.demo import generator as demo_data
from selpe_audit.demo.generator import COLUMNS, generate_rows, main, write_rows

DATA_DIR = Path(demo_data.__file__).parents[1] / "data"
SCHEMA_PATH = DATA_DIR / "ed_triage.schema.json"
SAMPLE_PATH = DATA_DIR / "ed_triage_sample.csv"
ADMITTED = {"admitted-ward", "admitted-icu"}


@pytest.fixture(scope="module")
def schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def rows_2000() -> list[dict]:
    return generate_rows(2000, seed=0)


def _typed(record: dict[str, str], schema: dict) -> dict:
    """Cast CSV strings back to the schema's types so rows compare by value."""
    out: dict = {}
    for key, value in record.items():
        kind = schema["properties"][key]["type"]
        out[key] = int(value) if kind == "integer" else float(value) if kind == "number" else value
    return out


def test_same_seed_same_rows_and_different_seed_differs() -> None:
    assert generate_rows(300, seed=7) == generate_rows(300, seed=7)
    assert generate_rows(300, seed=7) != generate_rows(300, seed=8)
    assert generate_rows(0, seed=1) == []
    assert len(generate_rows(1, seed=1)) == 1


def test_key_order_matches_schema(schema: dict, rows_2000: list[dict]) -> None:
    assert list(schema["properties"]) == list(COLUMNS)
    assert all(list(r) == list(COLUMNS) for r in rows_2000)


def test_every_row_validates_against_schema(schema: dict, rows_2000: list[dict]) -> None:
    validator = Draft202012Validator(schema)
    for row in rows_2000:
        errors = list(validator.iter_errors(row))
        assert not errors, (row, [e.message for e in errors])


def test_python_types_are_exact(schema: dict, rows_2000: list[dict]) -> None:
    for row in rows_2000:
        for key, value in row.items():
            kind = schema["properties"][key]["type"]
            expected = {"integer": int, "number": float, "string": str}[kind]
            assert type(value) is expected, (key, value)
        assert row["temperature_c"] == round(row["temperature_c"], 1)
        assert re.fullmatch(r"P\d{6}", row["patient_id"])
        assert row["diastolic_bp"] < row["systolic_bp"]


def test_complaint_variety_and_no_identifiers(rows_2000: list[dict]) -> None:
    complaints = [r["chief_complaint"] for r in rows_2000]
    assert len(set(complaints)) >= 500
    for text in complaints:
        assert text == text.strip() and "  " not in text and "{" not in text
        # No record numbers, phone numbers or dates in free text.
        assert not re.search(r"\d{3,}|\d+[/-]\d+", text), text


def test_acuity_class_balance() -> None:
    counts = Counter(r["acuity"] for r in generate_rows(10_000, seed=3))
    target = {1: 0.04, 2: 0.18, 3: 0.40, 4: 0.28, 5: 0.10}
    for acuity, share in target.items():
        assert abs(counts[acuity] / 10_000 - share) < 0.03, (acuity, counts)


def test_acuity_drives_vitals_and_disposition(rows_2000: list[dict]) -> None:
    high = [r for r in rows_2000 if r["acuity"] <= 2]
    low = [r for r in rows_2000 if r["acuity"] >= 4]

    def mean(rows: list[dict], key: str) -> float:
        return sum(r[key] for r in rows) / len(rows)

    def share(rows: list[dict], pred: Callable[[dict], bool]) -> float:
        return sum(1 for r in rows if pred(r)) / len(rows)

    assert mean(high, "heart_rate") > mean(low, "heart_rate") + 15
    assert mean(high, "respiratory_rate") > mean(low, "respiratory_rate")
    assert mean(high, "o2_saturation") < mean(low, "o2_saturation")
    admitted_high = share(high, lambda r: r["disposition"] in ADMITTED)
    admitted_low = share(low, lambda r: r["disposition"] in ADMITTED)
    assert admitted_high > admitted_low + 0.3
    by_air_or_road = {"ambulance", "helicopter"}
    assert share(high, lambda r: r["arrival_mode"] in by_air_or_road) > share(
        low, lambda r: r["arrival_mode"] in by_air_or_road
    )
    assert share(low, lambda r: r["disposition"] == "discharged") > 0.7


def test_elderly_admitted_more() -> None:
    rows = generate_rows(5000, seed=11)
    old = [r for r in rows if r["age"] >= 65]
    adult = [r for r in rows if 18 <= r["age"] < 65]
    rate = [sum(r["disposition"] in ADMITTED for r in g) / len(g) for g in (old, adult)]
    assert rate[0] > rate[1]


def test_some_people_have_repeat_visits(rows_2000: list[dict]) -> None:
    visits = Counter(r["patient_id"] for r in rows_2000)
    repeaters = [pid for pid, k in visits.items() if k > 1]
    assert repeaters
    assert max(visits.values()) <= 4
    assert 0.05 <= len(repeaters) / len(visits) <= 0.15
    # A person's sex is stable and age moves by at most a year across visits.
    by_pid: dict[str, list[dict]] = {}
    for row in rows_2000:
        by_pid.setdefault(row["patient_id"], []).append(row)
    for pid in repeaters:
        group = by_pid[pid]
        assert len({r["sex"] for r in group}) == 1
        ages = [r["age"] for r in group]
        assert max(ages) - min(ages) <= 1


def test_checked_in_sample_matches_generator(schema: dict) -> None:
    with SAMPLE_PATH.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        assert tuple(reader.fieldnames or ()) == COLUMNS
        sample = [_typed(rec, schema) for rec in reader]
    assert sample == generate_rows(400, seed=0)


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".jsonl"])
def test_write_rows_round_trips(tmp_path: Path, suffix: str) -> None:
    pl = pytest.importorskip("polars")
    rows = generate_rows(60, seed=5)
    path = write_rows(rows, tmp_path / f"rows{suffix}")
    reader = {".csv": pl.read_csv, ".parquet": pl.read_parquet, ".jsonl": pl.read_ndjson}
    df = reader[suffix](path)
    assert tuple(df.columns) == COLUMNS
    assert df.to_dicts() == rows


def test_write_rows_rejects_unknown_extension(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unsupported extension"):
        write_rows(generate_rows(3), tmp_path / "rows.xlsx")


def test_cli_writes_seeded_rows(tmp_path: Path, schema: dict) -> None:
    out = tmp_path / "cli.csv"
    assert main(["--n", "25", "--seed", "4", "--out", str(out)]) == 0
    with out.open(newline="", encoding="utf-8") as fh:
        got = [_typed(rec, schema) for rec in csv.DictReader(fh)]
    assert got == generate_rows(25, seed=4)
