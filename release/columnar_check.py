"""Coerce and validate private rows as polars expressions, for the rows that plainly pass.

The per-row path (`release.private_data`: Python coercion, then jsonschema) is the rule and
the only source of messages; it costs ~160 us a row. This module applies the same rules
column by column to the cells whose form leaves no doubt - an ASCII decimal integer or
number, a string in the enum, a length within bounds - and marks every other row for the
per-row path, which then decides it exactly as before (a "1_000" that Python's int takes,
a blank, a value out of range). A row the expressions accept is one the per-row path
accepts with the same coerced values, which `tests/test_private_data.py` checks on mixed
good and bad cells.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from selpe_audit.schema import Schema

_INT = r"^[+-]?[0-9]+$"
_FLOAT = r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$"
_EXACT = 2.0**53  # integers a float holds exactly


def coerce_plain(frame: pl.DataFrame, schema: Schema) -> tuple[pl.DataFrame, pl.Series] | None:
    """(the frame with every field coerced to its JSON type, a mask of the rows whose every
    cell passed here); None when a column's type is one only the per-row path reads. Two
    steps: parse, then check the parsed values (each expression evaluated once)."""
    parsed, checks = [], []
    for i, f in enumerate(schema.fields):
        spec = schema.raw["properties"][f.name]
        got = _parse(pl.col(f.name), frame.schema[f.name], spec["type"], f.kind == "text")
        if got is None:
            return None
        value, ok = got
        parsed += [value.alias(f.name), ok.fill_null(False).alias(f"__ok{i}")]
        checks.append(pl.col(f"__ok{i}") & _rules(pl.col(f.name), spec).fill_null(False))
    out = frame.lazy().select(parsed).select(
        *schema.field_names, ok=pl.all_horizontal(checks) if checks else pl.lit(True)).collect()
    return out.drop("ok"), out["ok"]


def _parse(col: pl.Expr, dtype: Any, want: str, text: bool) -> tuple[pl.Expr, pl.Expr] | None:
    """The cell as the JSON type, and whether its form left no doubt."""
    if want == "string":
        if dtype != pl.String:
            return None
        # Python's str.strip() also strips \x1c-\x1f, which Unicode's White_Space lacks
        return col, col.is_not_null() if text else ~col.str.contains(r"^[\s\x1c-\x1f]*$")
    if dtype == pl.String:
        s = col.str.strip_chars()
        is_int, is_float = s.str.contains(_INT), s.str.contains(_FLOAT)
        # casts of every cell, trusted only where the form matched (booleans, not when/then
        # over strings, which copies them)
        as_int, as_float = s.cast(pl.Int64, strict=False), s.cast(pl.Float64, strict=False)
    elif dtype.is_integer():
        as_int, as_float = col.cast(pl.Int64, strict=False), col.cast(pl.Float64)
        is_int, is_float = col.is_not_null(), col.is_not_null()
    elif dtype.is_float():
        as_int, as_float = pl.lit(None, pl.Int64), col.cast(pl.Float64)
        is_int, is_float = pl.lit(False), col.is_not_null()
    else:
        return None  # booleans, decimals, objects: the per-row path says what they are
    exact = as_float.is_finite() & (as_float.abs() < _EXACT)
    if want == "integer":  # "3.0" and 3.0 are the integer 3, as int(float(s)) makes them
        whole = is_float & exact & (as_float == as_float.round(0))
        int_ok = is_int & as_int.is_not_null() & (as_int.abs() < _EXACT)
        value = pl.when(int_ok).then(as_int).otherwise(as_float.cast(pl.Int64, strict=False))
        return value, int_ok | whole
    int_exact = as_int.is_not_null() & (as_int.abs() < _EXACT)
    return as_float, is_float & exact & (~is_int | int_exact)


def _rules(col: pl.Expr, spec: dict[str, Any]) -> pl.Expr:
    """The schema's rules on a parsed value (jsonschema's enum, bounds and lengths)."""
    ok = pl.lit(True)
    if "enum" in spec:
        ok = ok & col.is_in(list(spec["enum"]))
    if "minimum" in spec:
        ok = ok & (col >= spec["minimum"])
    if "maximum" in spec:
        ok = ok & (col <= spec["maximum"])
    if "minLength" in spec:
        ok = ok & (col.str.len_chars() >= spec["minLength"])
    if "maxLength" in spec:
        ok = ok & (col.str.len_chars() <= spec["maxLength"])
    return ok
