"""CoRTeC-style noisy counts: what is measured, over which public keys, with which budget.

Budget inside the counts share (eps_c): a gamma share for cohort x class counts (if
cohorts are configured), an alpha share for conditional rates (if configured), the rest
split evenly over the class balance and one class-conditional histogram per field.
Histograms of different fields over the same rows compose sequentially; within one
histogram, classes (and cohorts) are disjoint and compose in parallel.
"""

from __future__ import annotations

import itertools
from typing import Any

import polars as pl

from release.config import Cohort, RateSpec, ReleaseConfig
from release.opendp_mechanisms import COUNT_COLUMN, CountQuery, CountsRelease, NoisyCounts
from selpe_audit.schema import Field, Schema

CLASS_COL = "__class"
COHORT_COL = "__cohort"
OUTCOME_COL = "__outcome"
OTHER_COHORT = "(other)"


def key_col(name: str) -> str:
    return f"__key_{name}"


def public_values(f: Field) -> list[str]:
    """The public key set of a field, as strings: enum values or bin labels."""
    return [str(v) for v in f.enum] if f.kind == "categorical" else f.bin_labels()


def key_expr(f: Field) -> pl.Expr:
    """Row-by-row public key of a field's value (its category, or its numeric bin)."""
    if f.kind == "categorical":
        return pl.col(f.name).cast(pl.String)
    labels = f.bin_labels()
    inner = list(f.bins[1:-1])
    if not inner:
        return pl.lit(labels[0])
    return pl.col(f.name).cut(inner, labels=labels, left_closed=True).cast(pl.String)


def cohort_expr(schema: Schema, cohorts: tuple[Cohort, ...]) -> pl.Expr:
    expr: Any = pl.lit(OTHER_COHORT)
    for c in reversed(cohorts):
        cond = pl.lit(True)
        for name, rule in c.where.items():
            if schema.field(name).kind == "numeric":
                cond = cond & pl.col(name).is_between(rule[0], rule[1], closed="both")
            else:
                cond = cond & pl.col(name).is_in(list(rule))
        expr = pl.when(cond).then(pl.lit(c.name)).otherwise(expr)
    return expr


def derive_frame(priv_rows: list[dict[str, Any]], schema: Schema, cfg: ReleaseConfig,
                 unit_id: str | None) -> pl.LazyFrame:
    """Private rows plus public-key columns, computed row by row (1-stable)."""
    frame = pl.DataFrame(priv_rows, schema_overrides=_polars_types(schema),
                         infer_schema_length=None).lazy()
    cols = [pl.col(schema.label).cast(pl.String).alias(CLASS_COL)]
    cols += [key_expr(f).alias(key_col(f.name))
             for f in schema.record_fields if f.kind in ("categorical", "numeric")]
    if cfg.cohorts:
        cols.append(cohort_expr(schema, cfg.cohorts).alias(COHORT_COL))
    for i, r in enumerate(cfg.rates):
        cols.append(pl.col(r.outcome_field).is_in(list(r.outcome_values)).cast(pl.String)
                    .alias(f"{OUTCOME_COL}{i}"))
    keep = [c for c in [unit_id] if c]
    return frame.with_columns(cols).select(
        [*keep, CLASS_COL, *(c.meta.output_name() for c in cols[1:])])


def _polars_types(schema: Schema) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in schema.fields:
        out[f.name] = {"integer": pl.Int64, "number": pl.Float64}.get(f.json_type, pl.String)
    return out


def _keys(columns: dict[str, list[str]]) -> pl.DataFrame:
    names = list(columns)
    rows = list(itertools.product(*columns.values()))
    return pl.DataFrame(rows, schema=dict.fromkeys(names, pl.String), orient="row")


def plan_queries(schema: Schema, cfg: ReleaseConfig) -> list[CountQuery]:
    """The fixed, data-independent workload of count queries and their epsilons."""
    eps_c = cfg.counts_epsilon
    gamma = cfg.gamma if cfg.cohorts else 0.0
    alpha = cfg.alpha if cfg.rates else 0.0
    fields = [f for f in schema.record_fields if f.kind in ("categorical", "numeric")
              and f.name != schema.label]
    eps_hist = eps_c * (1 - gamma - alpha) / (1 + len(fields))
    classes = [str(c) for c in schema.classes]
    queries = [CountQuery("counts/class_balance", (CLASS_COL,), _keys({CLASS_COL: classes}),
                          eps_hist, "all rows, one cell per class",
                          "sequential with the other count queries")]
    for f in fields:
        queries.append(CountQuery(
            f"counts/histogram/{f.name}", (CLASS_COL, key_col(f.name)),
            _keys({CLASS_COL: classes, key_col(f.name): public_values(f)}), eps_hist,
            f"all rows; class x {'category' if f.kind == 'categorical' else 'bin'} of "
            f"{f.name}", "sequential across fields; parallel across classes and bins"))
    if cfg.cohorts:
        names = [c.name for c in cfg.cohorts] + [OTHER_COHORT]
        queries.append(CountQuery(
            "counts/cohorts", (COHORT_COL, CLASS_COL),
            _keys({COHORT_COL: names, CLASS_COL: classes}), eps_c * gamma,
            "all rows; cohort x class", "parallel across disjoint cohorts and classes"))
    for i, r in enumerate(cfg.rates):
        cells = {key_col(c): public_values(schema.field(c)) for c in r.cells}
        queries.append(CountQuery(
            f"counts/rates/{i}", (*cells, f"{OUTCOME_COL}{i}"),
            _keys({**cells, f"{OUTCOME_COL}{i}": ["false", "true"]}),
            eps_c * alpha / len(cfg.rates), f"all rows; cells of {', '.join(r.cells)} x outcome",
            "parallel across cells; the two counts per cell are disjoint rows"))
    return queries


# ----- post-processing into the artifact ---------------------------------------------------

def _lookup(res: NoisyCounts) -> dict[tuple[str, ...], int]:
    by = [c for c in res.table.columns if c != COUNT_COLUMN]
    return {tuple(str(r[c]) for c in by): int(r[COUNT_COLUMN])
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
        "class_balance": {
            "mechanism_id": "counts/class_balance",
            "classes": classes,
            "dp_counts": [cb[(str(c),)] for c in classes],
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
            "dp_counts_by_class": [[look[(str(c), v)] for v in values] for c in classes],
        }
    if cfg.cohorts:
        look = _lookup(res["counts/cohorts"])
        cohorts = []
        for c in [*cfg.cohorts, None]:
            name = c.name if c else OTHER_COHORT
            per_class = [look[(name, str(k))] for k in classes]
            cohorts.append({
                "name": name,
                "where": ({k: list(v) for k, v in c.where.items()} if c
                          else "rows in no other cohort"),
                "dp_counts_by_class": per_class,
                "post_size": sum(per_class),
            })
        out["cohorts"] = {"mechanism_id": "counts/cohorts", "classes": classes,
                          "cohorts": cohorts}
    if cfg.rates:
        out["rates"] = [_rate_block(schema, cfg, i, r, res[f"counts/rates/{i}"])
                        for i, r in enumerate(cfg.rates)]
    return out


def _rate_block(schema: Schema, cfg: ReleaseConfig, i: int, r: RateSpec,
                res: NoisyCounts) -> dict[str, Any]:
    look = _lookup(res)
    cells = []
    for combo in itertools.product(*(public_values(schema.field(c)) for c in r.cells)):
        n_yes, n_no = look[(*combo, "true")], look[(*combo, "false")]
        n_cell = n_yes + n_no
        suppressed = n_cell < cfg.n_min or n_cell <= 0
        rate = None if suppressed else min(1.0, max(0.0, n_yes / n_cell))
        cells.append({"cell": dict(zip(r.cells, combo, strict=True)), "dp_n_outcome": n_yes,
                      "dp_n_other": n_no, "post_n_cell": n_cell, "post_rate": rate,
                      "suppressed": suppressed})
    return {"mechanism_id": f"counts/rates/{i}", "name": r.name,
            "outcome": {"field": r.outcome_field, "values": list(r.outcome_values)},
            "cells_by": list(r.cells), "n_min": cfg.n_min, "cells": cells}
