"""The public-key codes every counts mode counts over, and the cohort and rate queries
they share.

Each private row becomes one row of small integer codes - its class, each field's category
or numeric bin, its cohort, each rate's outcome, its unit - computed from that row alone
(1-stable), so neighbouring datasets stay neighbouring. Every key set is public (the
schema's categories and bins, the configured cohorts), and every key of it is released.
"""

from __future__ import annotations

import itertools
from typing import Any

import polars as pl

from release.config_sections import CohortSpec, CountsConfig, RateSpec
from release.dp.counts import COUNT_COLUMN, CountQuery, NoisyCounts
from release.dp.unit import UNIT_COL, unit_codes
from release.private_data import polars_dtypes
from selpe_audit.artifact import records
from selpe_audit.bins import bin_expr
from selpe_audit.schema import CohortRule, Field, Schema

CLASS_COL = "__class"
COHORT_COL = "__cohort"
OUTCOME_COL = "__outcome"
OTHER_COHORT = "(other)"


def key_col(name: str) -> str:
    return f"__key_{name}"


def public_values(f: Field) -> list[str]:
    """The public key set of a field, as strings: enum values or bin labels."""
    return [str(v) for v in f.enum] if f.kind == "categorical" else f.bin_labels()


CODE = pl.UInt32  # keys travel as small integer codes: cheap to hand to OpenDP at 1M rows


def key_expr(f: Field) -> pl.Expr:
    """Row-by-row public key of a field's value: the index of its category or numeric bin."""
    if f.kind == "categorical":
        return pl.col(f.name).replace_strict(list(f.enum), list(range(len(f.enum))),
                                             return_dtype=CODE)
    return bin_expr(f)


def cohort_expr(schema: Schema, cohorts: tuple[CohortSpec, ...]) -> pl.Expr:
    """Index of the (disjoint) cohort a row falls in; len(cohorts) means '(other)'."""
    expr: Any = pl.lit(len(cohorts), dtype=CODE)
    for i, c in reversed(list(enumerate(cohorts))):
        cond = CohortRule.parse(schema, c.where).condition()
        expr = pl.when(cond).then(pl.lit(i, dtype=CODE)).otherwise(expr)
    return expr


def derive_frame(priv_rows: pl.DataFrame | list[dict[str, Any]], schema: Schema,
                 counts: CountsConfig, unit_id: str | None) -> pl.LazyFrame:
    """Private rows (a frame typed by the schema, or dicts) reduced to public-key codes,
    computed row by row (1-stable).

    The person id (if any) becomes its unit code (`unit_codes`: injective): OpenDP groups
    by it to bound each person's rows, and nothing else reads it.
    """
    frame = (priv_rows.lazy() if isinstance(priv_rows, pl.DataFrame) else
             pl.DataFrame(priv_rows, schema_overrides=polars_dtypes(schema),
                          infer_schema_length=None).lazy())
    cols = [pl.col(schema.label).replace_strict(schema.classes, list(range(len(schema.classes))),
                                                return_dtype=CODE).alias(CLASS_COL)]
    cols += [key_expr(f).alias(key_col(f.name))
             for f in schema.record_fields if f.kind in ("categorical", "numeric")]
    if counts.cohorts:
        cols.append(cohort_expr(schema, counts.cohorts).alias(COHORT_COL))
    for i, r in enumerate(counts.rates):
        cols.append(pl.col(r.outcome_field).is_in(list(r.outcome_values)).cast(CODE)
                    .alias(f"{OUTCOME_COL}{i}"))
    if unit_id:
        cols.append(unit_codes(pl.col(unit_id)).alias(UNIT_COL))
    return frame.select(cols)


def full_keys(columns: dict[str, int]) -> pl.DataFrame:
    """Every combination of codes 0..n-1 per column: the full public key set."""
    names = list(columns)
    rows = list(itertools.product(*(range(n) for n in columns.values())))
    return pl.DataFrame(rows, schema=dict.fromkeys(names, CODE), orient="row")


def cohort_query(schema: Schema, counts: CountsConfig, budget: float) -> CountQuery:
    """Cohort x class counts (``budget``: the query's epsilon, or rho in a zCDP context)."""
    return CountQuery(
        "counts/cohorts", (COHORT_COL, CLASS_COL),
        full_keys({COHORT_COL: len(counts.cohorts) + 1, CLASS_COL: len(schema.classes)}),
        budget, "all rows; cohort x class", "parallel across disjoint cohorts and classes")


def rate_queries(schema: Schema, counts: CountsConfig, budget: float) -> list[CountQuery]:
    """Cell x outcome counts per configured rate, sharing ``budget`` evenly."""
    queries = []
    for i, r in enumerate(counts.rates):
        cells = {key_col(c): len(public_values(schema.field(c))) for c in r.cells}
        queries.append(CountQuery(
            f"counts/rates/{i}", (*cells, f"{OUTCOME_COL}{i}"),
            full_keys({**cells, f"{OUTCOME_COL}{i}": 2}), budget / len(counts.rates),
            f"all rows; cells of {', '.join(r.cells)} x outcome",
            "parallel across cells; the two counts per cell are disjoint rows"))
    return queries


# ----- post-processing into the artifact ---------------------------------------------------

def lookup(res: NoisyCounts) -> dict[tuple[int, ...], int]:
    """Noisy count per tuple of key codes (in the query's ``by`` order)."""
    by = [c for c in res.table.columns if c != COUNT_COLUMN]
    return {tuple(int(r[c]) for c in by): int(r[COUNT_COLUMN])
            for r in res.table.iter_rows(named=True)}


def cohorts_block(schema: Schema, counts: CountsConfig, res: NoisyCounts) -> dict[str, Any]:
    """Noisy cohort x class counts, one entry per configured cohort and the catch-all."""
    look = lookup(res)
    cohorts = []
    for i, c in enumerate([*counts.cohorts, None]):
        per_class = tuple(look[(i, k)] for k in range(len(schema.classes)))
        cohorts.append(records.Cohort(c.name if c else OTHER_COHORT,
                                      {k: tuple(v) for k, v in c.where.items()} if c
                                      else "rows in no other cohort", per_class, sum(per_class)))
    return records.json_form(records.Cohorts("counts/cohorts", tuple(schema.classes),
                                             tuple(cohorts)))


def cohort_and_rate_blocks(schema: Schema, counts: CountsConfig,
                           results: dict[str, NoisyCounts]) -> dict[str, Any]:
    """The cohorts and rates blocks both counts modes add, from their measured results by id."""
    out: dict[str, Any] = {}
    if counts.cohorts:
        out["cohorts"] = cohorts_block(schema, counts, results["counts/cohorts"])
    if counts.rates:
        out["rates"] = [rate_block(schema, counts, i, r, results[f"counts/rates/{i}"])
                        for i, r in enumerate(counts.rates)]
    return out


def rate_block(schema: Schema, counts: CountsConfig, i: int, r: RateSpec,
               res: NoisyCounts) -> dict[str, Any]:
    """One rate's cells: two noisy counts each, and the rate as post-processing (clipped to
    [0, 1], suppressed below n_min)."""
    look = lookup(res)
    cells = []
    values = [public_values(schema.field(c)) for c in r.cells]
    for codes in itertools.product(*(range(len(v)) for v in values)):
        combo = [v[j] for v, j in zip(values, codes, strict=True)]
        n_yes, n_no = look[(*codes, 1)], look[(*codes, 0)]
        n_cell = n_yes + n_no
        suppressed = n_cell < counts.n_min or n_cell <= 0
        cells.append(records.RateCell(dict(zip(r.cells, combo, strict=True)), n_yes, n_no, n_cell,
                              suppressed,
                              None if suppressed else min(1.0, max(0.0, n_yes / n_cell))))
    return records.json_form(records.Rate(
        f"counts/rates/{i}", r.name, records.RateOutcome(r.outcome_field, tuple(r.outcome_values)),
        tuple(r.cells), counts.n_min, tuple(cells)))
