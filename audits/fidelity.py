"""Fidelity: are the synthetic records valid, and do their marginals match the real data?

Validity (every synthetic row, read through ``release.private_data``):
- rough: every field present and parseable as its type (a number where a number belongs);
- strict: the record satisfies the full JSON Schema of a record (ranges, enums, lengths).

Distributions (strictly valid synthetic rows vs. real rows): total variation distance
TVD = 1/2 sum |p - q| of 1-way (per field) and 2-way (per field pair) distributions, overall
and within each class of the label. Numeric fields are compared over the schema's public
bins, categorical fields by value, and free text by a coarse proxy - its word count in the
buckets of `TEXT_BUCKETS` - because exact texts hardly ever repeat; text *content* is
measured by the utility and MIA audits instead.
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from audits.io import load_record_schema
from audits.kinds import AuditKind, common_arguments, finish, make_report, read_rows, register
from release.private_data import PrivateTable, read_private_rows
from selpe_audit.schema import Field, Schema

TEXT_BUCKETS = ((0, 0, "0"), (1, 1, "1"), (2, 2, "2"), (3, 4, "3-4"), (5, 8, "5-8"),
                (9, 16, "9-16"), (17, 10**9, "17+"))
TEXT_PROXY = "word count in buckets 0, 1, 2, 3-4, 5-8, 9-16, 17+"
# read_private_rows reports these before schema validation: the value did not parse.
_PARSE_REASONS = ("missing value", "wrong type", "NaN or infinite")

Row = dict[str, Any]


def category(f: Field, value: Any) -> str:
    """The public category a value is compared by (bin label, enum value, text proxy)."""
    if f.kind == "numeric":
        return f.bin_labels()[f.bin_index(float(value))]
    if f.kind == "categorical":
        return str(value)
    words = len(str(value).split())
    return next(name for lo, hi, name in TEXT_BUCKETS if lo <= words <= hi)


def tvd(a: Sequence[tuple[str, ...]], b: Sequence[tuple[str, ...]]) -> float | None:
    """TVD between the empirical distributions of two samples; None if one is empty."""
    if not a or not b:
        return None
    ca, cb = Counter(a), Counter(b)
    return 0.5 * sum(abs(ca[k] / len(a) - cb[k] / len(b)) for k in ca.keys() | cb.keys())


def validity(table: PrivateTable) -> dict[str, Any]:
    """Share of rows that are roughly / strictly valid, and problems by field and reason."""
    n = len(table.priv_rows) + table.dropped_rows
    rough_bad = {p.row for p in table.problems if p.reason.startswith(_PARSE_REASONS)}
    by_field: dict[str, Counter[str]] = {}
    for p in table.problems:
        by_field.setdefault(p.field, Counter())[p.reason] += 1
    return {"rows": n, "strict_valid": len(table.priv_rows) / n,
            "rough_valid": (n - len(rough_bad)) / n,
            "problems_by_field": {k: dict(v) for k, v in sorted(by_field.items())},
            "ignored_columns": table.ignored_columns,
            "definition": {"rough": "every field present and parseable as its type",
                           "strict": "satisfies the full JSON Schema of a record"}}


def tvds(schema: Schema, syn: Sequence[Row], real: Sequence[Row],
          fields: Sequence[Field]) -> dict[str, Any]:
    def cats(rows: Sequence[Row], fs: Sequence[Field]) -> list[tuple[str, ...]]:
        return [tuple(category(f, r[f.name]) for f in fs) for r in rows]

    one = {f.name: tvd(cats(syn, [f]), cats(real, [f])) for f in fields}
    two = {f"{a.name} x {b.name}": tvd(cats(syn, [a, b]), cats(real, [a, b]))
           for a, b in itertools.combinations(fields, 2)}

    def mean(d: dict[str, float | None]) -> float | None:
        vals = [v for v in d.values() if v is not None]
        return sum(vals) / len(vals) if vals else None

    return {"n_synthetic": len(syn), "n_real": len(real), "mean_1way": mean(one),
            "max_1way": max((v for v in one.values() if v is not None), default=None),
            "mean_2way": mean(two),
            "max_2way": max((v for v in two.values() if v is not None), default=None),
            "tvd_1way": one, "tvd_2way": two}


def run_fidelity(schema: Schema, syn_table: PrivateTable, real: Sequence[Row]) -> dict[str, Any]:
    syn = syn_table.priv_rows
    fields = list(schema.record_fields)
    per_class = {}
    for c in schema.classes:
        s = [r for r in syn if r[schema.label] == c]
        q = [r for r in real if r[schema.label] == c]
        per_class[str(c)] = tvds(schema, s, q, [f for f in fields if f.name != schema.label])
    return {
        "validity": validity(syn_table),
        "comparison": {"numeric": "public bins of the schema (x-bins)",
                       "categorical": "by value",
                       "text": f"coarse proxy: {TEXT_PROXY}",
                       "rows": "strictly valid synthetic rows vs. all real rows"},
        "overall": tvds(schema, syn, real, fields),
        "per_class": per_class,
    }


def render(report: dict[str, Any], console: Console) -> None:
    r = report["result"]
    v = r["validity"]
    console.print(f"validity: {100 * v['rough_valid']:.1f} % rough, "
                  f"{100 * v['strict_valid']:.1f} % strict of {v['rows']} synthetic rows")
    for name, reasons in v["problems_by_field"].items():
        console.print(f"  {name}: " + ", ".join(f"{k} ({n})" for k, n in reasons.items()))

    def fmt(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    t = Table(title="total variation distance to the real data (lower is closer)")
    for col in ("scope", "n syn / real", "mean 1-way", "max 1-way", "mean 2-way", "max 2-way"):
        t.add_column(col)
    for scope, d in [("overall", r["overall"]),
                     *((f"class {c}", d) for c, d in r["per_class"].items())]:
        t.add_row(scope, f"{d['n_synthetic']} / {d['n_real']}", fmt(d["mean_1way"]),
                  fmt(d["max_1way"]), fmt(d["mean_2way"]), fmt(d["max_2way"]))
    console.print(t)
    ft = Table(title="1-way TVD per field (overall)")
    ft.add_column("field")
    ft.add_column("TVD")
    for name, x in r["overall"]["tvd_1way"].items():
        ft.add_row(name, fmt(x))
    console.print(ft)
    console.print(f"text fields compared by a {r['comparison']['text']}")


# ----- the ``selpe-audit audit fidelity`` kind -------------------------------------------

def _arguments(f: argparse.ArgumentParser) -> None:
    common_arguments(f)
    f.add_argument("--real", required=True, help="real (private) rows to compare with")


def _run(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    schema = load_record_schema(args.schema)
    syn_table = read_private_rows(args.synthetic, schema, invalid="drop")
    real = read_rows(args.real, schema, args.invalid_rows)
    result = run_fidelity(schema, syn_table, real)
    inputs = {"synthetic": args.synthetic, "real": args.real, "schema": args.schema}
    report = make_report("fidelity", inputs, {}, result, t0)
    finish("fidelity", args, report, render)
    return 0


AUDIT = register(AuditKind("fidelity", "schema validity and 1-/2-way TVD to real data",
                           _arguments, _run, __doc__))
