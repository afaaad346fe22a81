"""CoRTeC-style noisy counts: what is measured, over which public keys, with which budget.

The "marginals" counts mode (the model modes are `release.counts_model`). Budget inside the
counts share (eps_c): a gamma share for cohort x class counts (if cohorts are configured),
an alpha share for conditional rates (if configured); of the rest, ``class_share`` for the
class balance and the remainder split evenly over one class-conditional histogram per field.
Histograms of different fields over the same rows compose sequentially; within one
histogram, classes (and cohorts) are disjoint and compose in parallel.
"""

from __future__ import annotations

import itertools
from typing import Any

import polars as pl

from release.config import Cohort, RateSpec, ReleaseConfig
from release.opendp_mechanisms import (
    COUNT_COLUMN,
    CountQuery,
    CountsRelease,
    NoisyCounts,
    unit_codes,
)
from release.private_data import polars_dtypes
from selpe_audit.schema import CohortRule, Field, Schema

CLASS_COL = "__class"
COHORT_COL = "__cohort"
OUTCOME_COL = "__outcome"
UNIT_COL = "__unit"
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
    inner = f.bins[1:-1]
    if not inner:
        return pl.lit(0, dtype=CODE)
    return pl.sum_horizontal([pl.col(f.name) >= e for e in inner]).cast(CODE)


def cohort_expr(schema: Schema, cohorts: tuple[Cohort, ...]) -> pl.Expr:
    """Index of the (disjoint) cohort a row falls in; len(cohorts) means '(other)'."""
    expr: Any = pl.lit(len(cohorts), dtype=CODE)
    for i, c in reversed(list(enumerate(cohorts))):
        cond = CohortRule.parse(schema, c.where).condition()
        expr = pl.when(cond).then(pl.lit(i, dtype=CODE)).otherwise(expr)
    return expr


def derive_frame(priv_rows: pl.DataFrame | list[dict[str, Any]], schema: Schema,
                 cfg: ReleaseConfig, unit_id: str | None) -> pl.LazyFrame:
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
    if cfg.counts.cohorts:
        cols.append(cohort_expr(schema, cfg.counts.cohorts).alias(COHORT_COL))
    for i, r in enumerate(cfg.counts.rates):
        cols.append(pl.col(r.outcome_field).is_in(list(r.outcome_values)).cast(CODE)
                    .alias(f"{OUTCOME_COL}{i}"))
    if unit_id:
        cols.append(unit_codes(pl.col(unit_id)).alias(UNIT_COL))
    return frame.select(cols)


def _keys(columns: dict[str, int]) -> pl.DataFrame:
    """Every combination of codes 0..n-1 per column: the full public key set."""
    names = list(columns)
    rows = list(itertools.product(*(range(n) for n in columns.values())))
    return pl.DataFrame(rows, schema=dict.fromkeys(names, CODE), orient="row")


def plan_queries(schema: Schema, cfg: ReleaseConfig) -> list[CountQuery]:
    """The "marginals" mode's fixed, data-independent workload of count queries and their
    epsilons: the class balance gets ``class_share`` of the histogram budget (so a small
    class is not zeroed by noise), the class-conditional histograms split the rest."""
    eps_c = cfg.budget.counts_epsilon
    gamma = cfg.counts.gamma if cfg.counts.cohorts else 0.0
    alpha = cfg.counts.alpha if cfg.counts.rates else 0.0
    fields = [f for f in schema.record_fields if f.kind in ("categorical", "numeric")
              and f.name != schema.label]
    eps_tables = eps_c * (1 - gamma - alpha)
    eps_class = eps_tables * cfg.counts.class_share if fields else eps_tables
    eps_hist = (eps_tables - eps_class) / len(fields) if fields else 0.0
    classes = len(schema.classes)
    queries = [CountQuery("counts/class_balance", (CLASS_COL,), _keys({CLASS_COL: classes}),
                          eps_class, "all rows, one cell per class",
                          "sequential with the other count queries")]
    for f in fields:
        queries.append(CountQuery(
            f"counts/histogram/{f.name}", (CLASS_COL, key_col(f.name)),
            _keys({CLASS_COL: classes, key_col(f.name): len(public_values(f))}), eps_hist,
            f"all rows; class x {'category' if f.kind == 'categorical' else 'bin'} of "
            f"{f.name}", "sequential across fields; parallel across classes and bins"))
    if cfg.counts.cohorts:
        queries.append(cohort_query(schema, cfg, eps_c * gamma))
    return queries + rate_queries(schema, cfg, eps_c * alpha)


def cohort_query(schema: Schema, cfg: ReleaseConfig, budget: float) -> CountQuery:
    """Cohort x class counts (``budget``: the query's epsilon, or rho in a zCDP context)."""
    return CountQuery(
        "counts/cohorts", (COHORT_COL, CLASS_COL),
        _keys({COHORT_COL: len(cfg.counts.cohorts) + 1, CLASS_COL: len(schema.classes)}),
        budget, "all rows; cohort x class", "parallel across disjoint cohorts and classes")


def rate_queries(schema: Schema, cfg: ReleaseConfig, budget: float) -> list[CountQuery]:
    """Cell x outcome counts per configured rate, sharing ``budget`` evenly."""
    queries = []
    for i, r in enumerate(cfg.counts.rates):
        cells = {key_col(c): len(public_values(schema.field(c))) for c in r.cells}
        queries.append(CountQuery(
            f"counts/rates/{i}", (*cells, f"{OUTCOME_COL}{i}"),
            _keys({**cells, f"{OUTCOME_COL}{i}": 2}), budget / len(cfg.counts.rates),
            f"all rows; cells of {', '.join(r.cells)} x outcome",
            "parallel across cells; the two counts per cell are disjoint rows"))
    return queries


# ----- post-processing into the artifact ---------------------------------------------------

def _lookup(res: NoisyCounts) -> dict[tuple[int, ...], int]:
    """Noisy count per tuple of key codes (in the query's ``by`` order)."""
    by = [c for c in res.table.columns if c != COUNT_COLUMN]
    return {tuple(int(r[c]) for c in by): int(r[COUNT_COLUMN])
            for r in res.table.iter_rows(named=True)}


def counts_section(schema: Schema, cfg: ReleaseConfig, release: CountsRelease) -> dict[str, Any]:
    """The artifact's ``counts`` block: every released number, keyed by public values.

    Noisy counts are released signed (unbiased, possibly negative); decoders clamp at 0.
    Rates are post-processing: clip(n_outcome / n_cell, 0, 1), null when the noisy cell
    size is below n_min.
    """
    res = {r.id: r for r in release.results}
    classes = schema.classes
    cb = _lookup(res["counts/class_balance"])
    out: dict[str, Any] = {
        "signed": True,
        "mode": "marginals",
        "class_balance": {
            "mechanism_id": "counts/class_balance",
            "classes": classes,
            "dp_counts": [cb[(k,)] for k in range(len(classes))],
        },
        "histograms": {},
    }
    for f in schema.record_fields:
        rid = f"counts/histogram/{f.name}"
        if rid not in res:
            continue
        look = _lookup(res[rid])
        values = public_values(f)
        out["histograms"][f.name] = {
            "mechanism_id": rid,
            "kind": "categories" if f.kind == "categorical" else "bins",
            "keys": list(f.enum) if f.kind == "categorical" else values,
            "edges": None if f.kind == "categorical" else list(f.bins),
            "dp_counts_by_class": [[look[(k, j)] for j in range(len(values))]
                                   for k in range(len(classes))],
        }
    if cfg.counts.cohorts:
        out["cohorts"] = cohorts_block(schema, cfg, res["counts/cohorts"])
    if cfg.counts.rates:
        out["rates"] = [rate_block(schema, cfg, i, r, res[f"counts/rates/{i}"])
                        for i, r in enumerate(cfg.counts.rates)]
    return out


def cohorts_block(schema: Schema, cfg: ReleaseConfig, res: NoisyCounts) -> dict[str, Any]:
    """Noisy cohort x class counts, one entry per configured cohort and the catch-all."""
    look = _lookup(res)
    cohorts = []
    for i, c in enumerate([*cfg.counts.cohorts, None]):
        per_class = [look[(i, k)] for k in range(len(schema.classes))]
        cohorts.append({
            "name": c.name if c else OTHER_COHORT,
            "where": ({k: list(v) for k, v in c.where.items()} if c
                      else "rows in no other cohort"),
            "dp_counts_by_class": per_class,
            "post_size": sum(per_class),
        })
    return {"mechanism_id": "counts/cohorts", "classes": schema.classes, "cohorts": cohorts}


def rate_block(schema: Schema, cfg: ReleaseConfig, i: int, r: RateSpec,
                res: NoisyCounts) -> dict[str, Any]:
    look = _lookup(res)
    cells = []
    values = [public_values(schema.field(c)) for c in r.cells]
    for codes in itertools.product(*(range(len(v)) for v in values)):
        combo = [v[j] for v, j in zip(values, codes, strict=True)]
        n_yes, n_no = look[(*codes, 1)], look[(*codes, 0)]
        n_cell = n_yes + n_no
        suppressed = n_cell < cfg.counts.n_min or n_cell <= 0
        rate = None if suppressed else min(1.0, max(0.0, n_yes / n_cell))
        cells.append({"cell": dict(zip(r.cells, combo, strict=True)), "dp_n_outcome": n_yes,
                      "dp_n_other": n_no, "post_n_cell": n_cell, "post_rate": rate,
                      "suppressed": suppressed})
    return {"mechanism_id": f"counts/rates/{i}", "name": r.name,
            "outcome": {"field": r.outcome_field, "values": list(r.outcome_values)},
            "cells_by": list(r.cells), "n_min": cfg.counts.n_min, "cells": cells}
