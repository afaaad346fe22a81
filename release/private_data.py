"""The one module that opens private data: files (CSV, Parquet, JSONL), a database query
(`release.database`) or a notebook's DataFrame (`FrameSource`), through one validation
path.

Rows are coerced to the schema's types and validated with jsonschema; the rows whose cells
plainly pass are coerced and checked as polars expressions instead (`release.columnar_check`,
the same rules, ~100x faster), every other row goes through the per-row path. Problems are
reported by file, row number, field and reason - never by value: these messages appear on
the enclave console and must be safe to read aloud. Row numbers count data rows from 1
(the header of a CSV is not a row).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import polars as pl

from release.columnar_check import coerce_plain
from release.database import DatabaseSource, read_frame
from release.frame_source import FrameSource
from selpe_audit.artifact.records import Source
from selpe_audit.errors import UserError
from selpe_audit.schema import Field, Schema

InvalidPolicy = Literal["fail", "drop"]
FORMATS = {".csv": "csv", ".parquet": "parquet", ".jsonl": "jsonl", ".ndjson": "jsonl"}


@dataclass(frozen=True)
class RowProblem:
    row: int
    field: str
    reason: str


@dataclass
class PrivateTable:
    """Validated private rows, typed by the schema (``frame``), and the console-only
    invalid-row report. ``priv_rows`` (dicts) is made on first use only: a counts-only
    release reads columns and never builds a million dicts."""

    frame: pl.DataFrame
    problems: list[RowProblem] = field(default_factory=list)
    dropped_rows: int = 0
    ignored_columns: list[str] = field(default_factory=list)

    @cached_property
    def priv_rows(self) -> list[dict[str, Any]]:
        return self.frame.to_dicts()


def read_private_rows(source: str | Path | DatabaseSource | FrameSource, schema: Schema,
                      invalid: InvalidPolicy = "fail") -> PrivateTable:
    """Read, coerce and validate every row; `UserError` on any source-level problem."""
    if isinstance(source, DatabaseSource | FrameSource):
        database = isinstance(source, DatabaseSource)
        frame = read_frame(source) if database else source.frame
        where = source.display
        if frame.height == 0:
            raise UserError(f"{where}: " + ("the query returned no rows" if database
                                            else "it has no rows"))
        _check_column_types(frame, schema, where, database)
        return _validate(frame, schema, invalid, where)
    p = Path(source)
    fmt = FORMATS.get(p.suffix.lower())
    if fmt is None:
        raise UserError(f"{p}: unknown data format '{p.suffix}'; use .csv, .parquet or .jsonl")
    if not p.is_file():
        raise UserError(f"{p}: data file not found")
    if p.stat().st_size == 0:
        raise UserError(f"{p}: the file is empty; export the records with a header row")
    if fmt == "jsonl":
        _check_utf8(p)
    frame = _read_frame(p, fmt)
    if frame.height == 0:
        raise UserError(f"{p}: the file has no data rows")
    return _validate(frame, schema, invalid, str(p))


def source_description(source: str | Path | DatabaseSource | FrameSource,
                       key: bytes) -> Source:
    """The artifact's ``source`` block: the kind of source, never its location (``key``: the
    enclave secret that keys a query's HMAC)."""
    if isinstance(source, DatabaseSource):
        return source.public_description(key)
    if isinstance(source, FrameSource):
        return Source("dataframe")
    return Source("file", FORMATS[Path(source).suffix.lower()])


def _validate(frame: pl.DataFrame, schema: Schema, invalid: InvalidPolicy,
              where: str) -> PrivateTable:
    missing = [n for n in schema.field_names if n not in frame.columns]
    if missing:
        raise UserError(f"{where}: missing column '{missing[0]}' required by the schema"
                        + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    ignored = [c for c in frame.columns if c not in schema.field_names]
    frame = frame.select(schema.field_names)

    validator = schema.row_validator()
    plain = coerce_plain(frame, schema)
    if plain is None:  # a column type only the per-row path reads (JSONL, booleans, ...)
        plain = frame.clear(), pl.Series([False] * frame.height)
    coerced, ok = plain
    doubtful = frame.with_row_index("__row").filter(~ok)
    kept: list[dict[str, Any]] = []  # rows the per-row path accepts, with their index
    problems: list[RowProblem] = []
    bad_rows = 0
    for raw in doubtful.iter_rows(named=True):
        i = raw.pop("__row") + 1
        row, row_problems = _coerce_row(raw, schema, i)
        if not row_problems:
            row_problems = [_describe(i, err) for err in validator.iter_errors(row)]
        if row_problems:
            bad_rows += 1
            problems.extend(row_problems)
        else:
            kept.append({**row, "__row": i - 1})
    if bad_rows and invalid == "fail":
        first = problems[0]
        raise UserError(f"{where}: {bad_rows} invalid row(s); first: row {first.row}, field "
                        f"'{first.field}': {first.reason}. Fix the data, or pass "
                        "--invalid-rows drop to leave such rows out")
    typed = coerced.with_row_index("__row").filter(ok) if ok.any() else None
    if kept:  # in row order among the rows the columnar check passed
        slow = pl.DataFrame(kept, schema={**polars_dtypes(schema), "__row": pl.UInt32})
        typed = slow if typed is None else pl.concat([typed, slow.select(typed.columns)]).sort(
            "__row")
    if typed is None or typed.height == 0:
        raise UserError(f"{where}: no valid rows left after dropping invalid ones")
    return PrivateTable(typed.drop("__row"), problems, bad_rows, ignored)


def polars_dtypes(schema: Schema) -> dict[str, Any]:
    """Each field's polars type once coerced: Int64, Float64 or String."""
    return {f.name: {"integer": pl.Int64, "number": pl.Float64}.get(f.json_type, pl.String)
            for f in schema.fields}


def _check_column_types(frame: pl.DataFrame, schema: Schema, where: str,
                        database: bool) -> None:
    """A column whose (database or DataFrame) type the field cannot take is one error, not
    one per row."""
    for f in schema.fields:
        if f.name not in frame.columns:
            continue
        dtype = frame.schema[f.name]
        text = dtype in (pl.String, pl.Categorical) or isinstance(dtype, pl.Enum)
        number = dtype.is_numeric()
        ok = text if f.kind == "text" else (text or number)
        if not ok:
            target = "text" if f.json_type == "string" else "numeric"
            fix = (f"cast it in the query (e.g. {f.name}::{target})" if database else
                   f"cast the column to {'strings' if target == 'text' else 'numbers'}")
            raise UserError(f"{where}: column '{f.name}' has type {dtype}, which the schema's "
                            f"{f.json_type} field cannot take; {fix}")


def _check_utf8(p: Path) -> None:
    data = p.read_bytes()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise UserError(f"{p}: line {line} is not valid UTF-8; re-export it as UTF-8") from None


def _read_frame(p: Path, fmt: str) -> pl.DataFrame:
    """Read without type coercion; typing is checked per field later.

    CSV cells stay strings (polars refuses a file that is not UTF-8); JSONL is parsed line
    by line with the stdlib so that a wrong JSON type is reported instead of being unified
    to a string by type inference.
    """
    if fmt == "jsonl":
        return _read_jsonl(p)
    try:
        if fmt == "csv":
            return pl.read_csv(p, infer_schema=False, missing_utf8_is_empty_string=False)
        return pl.read_parquet(p)
    except Exception as e:  # polars' messages may quote file content: report only the kind
        if fmt == "csv":
            _check_utf8(p)  # polars refuses bad UTF-8 too, but without the line
        raise UserError(f"{p}: cannot parse as {fmt.upper()} ({type(e).__name__}); check "
                        "quoting, delimiters and that every line has the same columns") from None


def _read_jsonl(p: Path) -> pl.DataFrame:
    records: list[dict[str, Any]] = []
    with p.open(encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                raise UserError(f"{p}: line {line_no} is not valid JSON") from None
            if not isinstance(obj, dict):
                raise UserError(f"{p}: line {line_no} is not a JSON object")
            records.append(obj)
    columns = list(dict.fromkeys(k for r in records for k in r))
    return pl.DataFrame({c: [r.get(c) for r in records] for c in columns},
                        schema={c: pl.Object for c in columns})


def _coerce_row(raw: dict[str, Any], schema: Schema, row: int) -> tuple[dict, list[RowProblem]]:
    out: dict[str, Any] = {}
    problems: list[RowProblem] = []
    for f in schema.fields:
        value, reason = _coerce_value(raw[f.name], f)
        if reason:
            problems.append(RowProblem(row, f.name, reason))
        out[f.name] = value
    return out, problems


def _coerce_value(v: Any, f: Field) -> tuple[Any, str | None]:
    """Turn a cell into the schema's JSON type, or say (without the value) why not."""
    if v is None or (isinstance(v, str) and v.strip() == "" and f.kind != "text"):
        return None, "missing value"
    want = f.json_type
    if want == "string":
        if isinstance(v, str):
            return v, None
        if isinstance(v, bool) or not isinstance(v, int | float):
            return None, "wrong type: expected text"
        return None, "wrong type: expected text, got a number"
    if isinstance(v, bool):
        return None, f"wrong type: expected {want}, got true/false"
    if isinstance(v, str):
        s = v.strip()
        try:
            num: float | int = int(s) if want == "integer" else float(s)
        except ValueError:
            try:
                num = float(s)
            except ValueError:
                return None, "wrong type: expected " + ("an integer" if want == "integer"
                                                         else "a number")
    elif isinstance(v, int | float):
        num = v
    elif isinstance(v, Decimal):  # PostgreSQL numeric
        num = int(v) if want == "integer" and v == v.to_integral_value() else float(v)
    else:
        return None, f"wrong type: expected {want}"
    if isinstance(num, float) and not math.isfinite(num):
        return None, "NaN or infinite value"
    if want == "integer":
        if isinstance(num, float):
            if not num.is_integer():
                return None, "wrong type: expected an integer, got a fraction"
            num = int(num)
        return num, None
    return float(num), None


def _describe(row: int, err: Any) -> RowProblem:
    """A jsonschema error as row/field/reason, built from the *rule*, never the value."""
    path = list(err.absolute_path)
    name = str(path[0]) if path else "(row)"
    rule, bound = err.validator, err.validator_value
    reasons = {
        "minimum": f"below the minimum {bound}",
        "maximum": f"above the maximum {bound}",
        "maxLength": f"text longer than maxLength {bound}",
        "minLength": f"text shorter than minLength {bound}",
        "enum": "not one of the allowed categories",
        "type": f"wrong type: expected {bound}",
        "required": "missing field",
        "additionalProperties": "unexpected field",
    }
    return RowProblem(row, name, reasons.get(rule, f"violates '{rule}'"))
