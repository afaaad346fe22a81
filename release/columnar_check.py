"""Coerce and validate private rows as polars expressions, for the rows that plainly pass.

The per-row path (`release.private_data`: Python coercion, then jsonschema) is the rule and
the only source of messages; it costs ~160 us a row. This module applies the same rules
column by column to the cells whose form leaves no doubt - a number polars parses, a
string in the enum, a length within bounds - and marks every other row for the per-row
path, which then decides it exactly as before (a "1_000" that Python's int takes, a blank,
a value out of range). A row the expressions accept is one the per-row path accepts with
the same coerced values, which `tests/test_private_data.py` checks on mixed good and bad
cells.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from selpe_audit.schema import Schema

_EXACT = 2.0**53  # integers a float holds exactly


def coerce_plain(frame: pl.DataFrame, schema: Schema) -> tuple[pl.DataFrame, pl.Series] | None:
    """(the frame with every field coerced to its JSON type, a mask of the rows whose every
    cell passed here); None when a column's type is one only the per-row path reads.

    Integers are parsed as integers first; only the rows that fail are parsed again with
    whole fractions ("3.0") taken as integers, so a clean column costs one cast."""
    first = _check(frame, schema, fractions=False)
    if first is None:
        return None
    out, ok = first
    if ok.all():
        return out, ok
    retry = (~ok).arg_true()
    again, ok_again = _check(frame[retry], schema, fractions=True)  # type: ignore[misc]
    out = pl.concat([out.with_columns(__i=pl.int_range(out.height, dtype=pl.UInt32)).filter(ok),
                     again.with_columns(__i=retry)]).sort("__i").drop("__i")
    return out, ok.scatter(retry, ok_again)


def _check(frame: pl.DataFrame, schema: Schema,
           fractions: bool) -> tuple[pl.DataFrame, pl.Series] | None:
    """One pass: parse, then check the parsed values (each expression evaluated once)."""
    parsed, checks = [], []
    for i, f in enumerate(schema.fields):
        spec = schema.raw["properties"][f.name]
        got = _parse(pl.col(f.name), frame.schema[f.name], spec["type"], f.kind == "text",
                     fractions)
        if got is None:
            return None
        value, ok = got
        parsed += [value.alias(f.name), ok.fill_null(False).alias(f"__ok{i}")]
        checks.append(pl.col(f"__ok{i}") & _rules(pl.col(f.name), spec).fill_null(False))
    out = frame.lazy().select(parsed).select(
        *schema.field_names, ok=pl.all_horizontal(checks) if checks else pl.lit(True)).collect()
    return out.drop("ok"), out["ok"]


def _parse(col: pl.Expr, dtype: Any, want: str, text: bool,
           fractions: bool) -> tuple[pl.Expr, pl.Expr] | None:
    """The cell as the JSON type, and whether its form left no doubt."""
    if want == "string":
        if dtype != pl.String:
            return None
        # Python's str.strip() also strips \x1c-\x1f, which Unicode's White_Space lacks
        return col, col.is_not_null() if text else ~col.str.contains(r"^[\s\x1c-\x1f]*$")
    if dtype == pl.String:
        # polars parses a strict subset of what Python's int() and float() take ("1_000",
        # "\u0663" and "\x1c3" are refused), to the same values: a cell it parses needs no
        # second look (tests/test_private_data.py compares the two on every form)
        s = col.str.strip_chars()
        as_int, as_float = s.cast(pl.Int64, strict=False), s.cast(pl.Float64, strict=False)
    elif dtype.is_integer():
        as_int, as_float = col.cast(pl.Int64, strict=False), col.cast(pl.Float64)
    elif dtype.is_float():
        as_int, as_float = pl.lit(None, pl.Int64), col.cast(pl.Float64)
    else:
        return None  # booleans, decimals, objects: the per-row path says what they are
    exact = as_float.is_finite() & (as_float.abs() < _EXACT)
    if want != "integer":
        return as_float, exact
    int_ok = (as_int.abs() < _EXACT).fill_null(False)
    if not fractions:
        return as_int, int_ok
    # "3.0" and 3.0 are the integer 3, as int(float(s)) makes them
    whole = (exact & (as_float.floor() == as_float)).fill_null(False)
    return pl.coalesce(as_int, as_float.cast(pl.Int64, strict=False)), int_ok | whole


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
