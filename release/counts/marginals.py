"""The "marginals" counts mode: CoRTeC-style Laplace histograms, pure epsilon-DP.

Budget inside the counts share (eps_c): a gamma share for cohort x class counts (if cohorts
are configured), an alpha share for conditional rates (if configured); of the rest,
``class_share`` for the class balance and the remainder split evenly over one
class-conditional histogram per field. Histograms of different fields over the same rows
compose sequentially; within one histogram, classes (and cohorts) are disjoint and compose
in parallel.
"""

from __future__ import annotations

from typing import Any

from release.config_sections import CountsConfig
from release.counts.keys import (
    CLASS_COL,
    cohort_and_rate_blocks,
    cohort_query,
    full_keys,
    key_col,
    lookup,
    public_values,
    rate_queries,
)
from release.counts.registry import CountsBudget, CountsRows, MeasuredCounts, register
from release.dp.counts import CountQuery, CountsRelease, release_counts
from selpe_audit.artifact.counts_modes import MARGINALS
from selpe_audit.artifact.records import ClassBalance, Histogram, LedgerEntry, json_form
from selpe_audit.schema import Schema


def plan_queries(schema: Schema, counts: CountsConfig, eps_c: float) -> list[CountQuery]:
    """The fixed, data-independent workload of count queries at ``eps_c`` and their
    epsilons: the class balance gets ``class_share`` of the histogram budget (so a small
    class is not zeroed by noise), the class-conditional histograms split the rest."""
    gamma, alpha = counts.table_shares(schema)
    fields = [f for f in schema.record_fields if f.kind in ("categorical", "numeric")
              and f.name != schema.label]
    eps_tables = eps_c * (1 - gamma - alpha)
    eps_class = eps_tables * counts.class_share if fields else eps_tables
    eps_hist = (eps_tables - eps_class) / len(fields) if fields else 0.0
    classes = len(schema.classes)
    queries = [CountQuery("counts/class_balance", (CLASS_COL,), full_keys({CLASS_COL: classes}),
                          eps_class, "all rows, one cell per class",
                          "sequential with the other count queries")]
    for f in fields:
        queries.append(CountQuery(
            f"counts/histogram/{f.name}", (CLASS_COL, key_col(f.name)),
            full_keys({CLASS_COL: classes, key_col(f.name): len(public_values(f))}), eps_hist,
            f"all rows; class x {'category' if f.kind == 'categorical' else 'bin'} of "
            f"{f.name}", "sequential across fields; parallel across classes and bins"))
    if counts.cohorts:
        queries.append(cohort_query(schema, counts, eps_c * gamma))
    return queries + rate_queries(schema, counts, eps_c * alpha)


def counts_section(schema: Schema, counts: CountsConfig, release: CountsRelease) -> dict[str, Any]:
    """The artifact's ``counts`` block: every released number, keyed by public values.

    Noisy counts are released signed (unbiased, possibly negative); decoders clamp at 0.
    Rates are post-processing: clip(n_outcome / n_cell, 0, 1), null when the noisy cell
    size is below n_min.
    """
    res = {r.id: r for r in release.results}
    classes = schema.classes
    cb = lookup(res["counts/class_balance"])
    histograms = {}
    for f in schema.record_fields:
        rid = f"counts/histogram/{f.name}"
        if rid not in res:
            continue
        look = lookup(res[rid])
        values = public_values(f)
        histograms[f.name] = Histogram(
            rid, "categories" if f.kind == "categorical" else "bins",
            tuple(f.enum) if f.kind == "categorical" else tuple(values),
            tuple(tuple(look[(k, j)] for j in range(len(values))) for k in range(len(classes))),
            edges=None if f.kind == "categorical" else tuple(f.bins))
    balance = ClassBalance("counts/class_balance", tuple(classes),
                           tuple(cb[(k,)] for k in range(len(classes))))
    return {"signed": True, "class_balance": json_form(balance),
            "histograms": {k: json_form(h) for k, h in histograms.items()},
            **cohort_and_rate_blocks(schema, counts, res)}


class MarginalsMode:
    """Laplace count queries through one OpenDP Context (pure epsilon-DP)."""

    descriptor = MARGINALS
    accountant = "a Context compositor over the count queries (pure epsilon-DP)"

    def measure(self, rows: CountsRows, schema: Schema, counts: CountsConfig,
                budget: CountsBudget) -> MeasuredCounts:
        released = release_counts(rows.frame.lazy(), rows.unit,
                                  plan_queries(schema, counts, budget.epsilon))
        entries = [LedgerEntry(r.id, r.mechanism, r.constructor, r.scale, r.epsilon, 0.0,
                               r.scope, r.composition) for r in released.results]
        return MeasuredCounts(entries, counts_section(schema, counts, released),
                              released.total_epsilon, 0.0,
                              f"pure epsilon-DP (epsilon {released.total_epsilon:.4g})")


MODE = register(MarginalsMode())
