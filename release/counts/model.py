"""The model counts modes: OpenDP's contingency tables (``opendp.extras.mbi``) in zCDP.

Modes ``fixed``, ``aim`` and ``mst`` release noisy marginals with Gaussian noise, and OpenDP
fits the maximum-entropy model (Private-PGM) that decode samples records from. One OpenDP
Context in rho-zCDP holds every count of the release:

    table    (1 - gamma - alpha) of rho: the mode's marginals over class, fields, topics
    cohorts  gamma of rho (if configured): cohort x class counts, as in "marginals"
    rates    alpha of rho (if configured): cell x outcome counts, as in "marginals"

The total rho is the largest whose OpenDP conversion to (epsilon, delta) at the counts'
delta fits the counts' epsilon. ``fixed`` measures the class balance (weighted so that it
gets ``class_share`` of the table's rho: a class with a few percent of the rows is not
zeroed) and the class's 2-way marginal with every field and topic - CoRTeC's workload.
Known upstream defects handled here: AIM and MST can overrun their budget by a float ulp
(opendp issue 2789), so they get the largest slot a hair under theirs that passes a dry
run on public dummy data (`release.dp.tables`, where every OpenDP call of these modes is);
every key set gets a null cell last, which no row reaches and
decode never samples.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import polars as pl

from release.config_sections import CountsConfig
from release.counts.keys import (
    CLASS_COL,
    cohort_and_rate_blocks,
    cohort_query,
    key_col,
    public_values,
    rate_queries,
)
from release.counts.registry import CountsBudget, CountsRows, MeasuredCounts, register
from release.counts.workload import Workload, public_workload
from release.dp import OpenDPException
from release.dp.counts import NoisyCounts, make_context, measure_count
from release.dp.tables import (
    Algorithm,
    CalibratedFixed,
    Count,
    calibrate_table_slot,
    make_aim,
    make_mst,
    make_table_query,
)
from release.dp.zcdp import CONVERSION_CONSTRUCTOR, approx_dp_of_rho, calibrate_zcdp_budget
from selpe_audit.artifact import model_block as artifact_model
from selpe_audit.artifact.counts_modes import AIM, FIXED, MST, CountsModeDescriptor
from selpe_audit.artifact.model_block import TOPIC_PREFIX, Topics, topic_column
from selpe_audit.artifact.records import ClassBalance, Histogram, LedgerEntry, json_form
from selpe_audit.bins import grid_size
from selpe_audit.errors import UserError
from selpe_audit.schema import Field, Schema

TABLE_ID = "counts/model"
CONVERSION_ID = "counts/zcdp-to-approx-dp"
ZCDP_ACCOUNTING = "rho-zCDP"
#: AIM's share of its budget for the 1-way marginal of every column (see `AIM_MODE`)
AIM_ONEWAY_SPLIT = 1 / 16


def topic_col(name: str, slot: int = 1) -> str:
    """The private frame's column of a text field's topic code (in slot ``slot``): the
    model column's name ("topic:F#2") as a private column ("__topic_F#2")."""
    return "__topic_" + topic_column(name, slot).removeprefix(TOPIC_PREFIX)


@dataclass(frozen=True)
class ModelColumn(artifact_model.ModelColumn):
    """The artifact's model column (its name: the field's, or "topic:<field>"; the field it
    describes; its kind; its keys) and ``frame_col``, its column of public-key codes in the
    private frame."""

    frame_col: str = ""


def model_columns(schema: Schema, topics: dict[str, int],
                  slots: Mapping[str, int] | None = None,
                  workload: Workload | None = None) -> list[ModelColumn]:
    """The class first, then every categorical or numeric field (a numeric one over the
    workload's bins: its public bins, or adjacent ones merged), then each text topic (a
    keyword field: one per slot, ``slots[field]``)."""
    workload = workload or public_workload(schema)
    cols = [ModelColumn(schema.label, schema.label, "class",
                        tuple(str(c) for c in schema.classes), frame_col=CLASS_COL)]
    for f in schema.record_fields:
        if f.kind in ("categorical", "numeric") and f.name != schema.label:
            planned = workload.field(f.name)
            edges = planned.edges if planned is not None else None
            merged = edges if edges is not None and tuple(edges) != tuple(f.bins) else None
            cols.append(ModelColumn(f.name, f.name,
                                    "categories" if f.kind == "categorical" else "bins",
                                    tuple(public_values(f) if f.kind == "categorical"
                                          else f.bin_labels(merged)),
                                    merged, frame_col=key_col(f.name)))
    for name, k in topics.items():
        cols.extend(ModelColumn(topic_column(name, s), name, "topic",
                                tuple(str(j) for j in range(k)), frame_col=topic_col(name, s))
                    for s in range(1, (slots or {}).get(name, 1) + 1))
    return cols


def merged_codes(schema: Schema, cols: list[ModelColumn]) -> list[pl.Expr]:
    """The private frame's public-bin codes of each numeric column with merged bins, as
    codes of the merged bins (a function of each row's own code)."""
    out = []
    for c in cols:
        if c.kind == "bins" and c.edges is not None:
            f = schema.field(c.field)
            groups = [sum(e <= f.bins[j] for e in c.edges[1:-1]) for j in range(len(f.bins) - 1)]
            out.append(pl.col(c.frame_col).replace_strict(
                list(range(len(groups))), groups, return_dtype=pl.UInt32))
    return out


def fixed_workload(cols: list[ModelColumn], class_share: float, topic_share: float,
                   workload: Workload | None = None) -> list[Count]:
    """The class balance, the class's 2-way marginal with every topic and every field the
    workload measures with the class, and the 1-way marginal of each field it measures
    alone, weighted so that the class balance gets ``class_share`` of the rho and the
    free-text topics together ``topic_share`` (split evenly; without topics it goes to the
    fields), the fields the rest, a field alone 1 / classes of a field with the class (Fixed
    gives query i the scale ``scale / weight_i``, so its rho is proportional to weight_i
    squared). A topic x class table has many cells, and the text's label signal lives in it
    alone: an even split would leave it mostly noise."""
    label, others = cols[0].frame_col, cols[1:]
    if not others:
        return [Count((label,))]
    alone = {f.field for f in workload.fields if f.margin == "one-way"} if workload else set()
    one_way = 1 / len(cols[0].keys)
    weight = [one_way if c.field in alone else 1.0 for c in others]
    topics = [c.kind == "topic" for c in others]
    n_topics = sum(topics)
    fields_weight = sum(w for w, t in zip(weight, topics, strict=True) if not t)
    if n_topics and fields_weight:
        rho = [topic_share / n_topics if t else (1 - class_share - topic_share) * w /
               fields_weight for w, t in zip(weight, topics, strict=True)]
    else:  # one kind of column: it gets all but the class's share
        rho = [(1 - class_share) * w / sum(weight) for w in weight]
    unit = min(rho)
    return [Count((label,), weight=math.sqrt(class_share / unit)),
            *(Count((c.frame_col,) if c.field in alone else (label, c.frame_col),
                    weight=math.sqrt(r / unit))
              for c, r in zip(others, rho, strict=True))]


@dataclass(frozen=True)
class ModelRelease:
    """What the counts stage released in a model mode, and its accounting."""

    table: Any                      # opendp ContingencyTable (noisy marginals + fitted model)
    table_rho: float
    others: list[NoisyCounts]       # cohorts and rates (Gaussian)
    rho: float
    epsilon: float
    delta: float


def release_model(mode: ModelMode, rows: CountsRows, schema: Schema, counts: CountsConfig,
                  cols: list[ModelColumn], budget: CountsBudget) -> ModelRelease:
    """Every count of the release through one OpenDP Context in rho-zCDP, at ``budget``."""
    gamma, alpha = counts.table_shares(schema)
    (rho,) = calibrate_zcdp_budget(budget.epsilon, budget.delta, [1.0])
    others = ([cohort_query(schema, counts, rho * gamma)] if counts.cohorts else []) + \
        rate_queries(schema, counts, rho * alpha)
    frame, unit = rows.frame.lazy().with_columns(merged_codes(schema, cols)), rows.unit
    algo = mode.algorithm(cols, counts, rows.workload)
    table_slot = rho * (1 - gamma - alpha)
    if mode.adaptive:
        table_slot = calibrate_table_slot(frame, unit, cols, algo, table_slot)
    slots = [table_slot, *(q.epsilon for q in others)]
    if table_slot < rho * (1 - gamma - alpha):  # the unspent hair: never queried
        slots.append(rho * (1 - gamma - alpha) - table_slot)
    ctx = make_context(frame, unit, slots, measure="rho")
    measurement = make_table_query(ctx, unit, cols, algo)
    table_rho = float(measurement.map(ctx.d_in))  # OpenDP's map (the Context checks it too)
    try:
        table = ctx(measurement)
    except OpenDPException as e:
        if "insufficient budget" not in str(e):
            raise
        raise UserError(f"counts mode '{counts.mode}': OpenDP's {mode.opendp_name} overran "
                        "its budget by a float rounding error (opendp issue 2789) on a "
                        "data-dependent path; nothing was released, the reservation is "
                        "charged - use counts.mode = \"fixed\"") from None
    results = [measure_count(ctx, unit, q) for q in others]
    spent = table_rho + sum(r.epsilon for r in results)  # NoisyCounts.epsilon holds rho here
    if spent > rho * (1 + 1e-9):
        raise RuntimeError("OpenDP accounting of the counts exceeds their rho")
    eps, delta = approx_dp_of_rho(rho, budget.delta)
    return ModelRelease(table, table_rho, results, rho, eps, delta)


# ----- ledger ----------------------------------------------------------------------------

def ledger_entries(mode: ModelMode, cols: list[ModelColumn],
                   rel: ModelRelease) -> list[LedgerEntry]:
    """One entry per released marginal set, the Gaussian cohorts and rates, and OpenDP's
    conversion of the counts' total rho to (epsilon, delta)."""
    marginals = rel.table.marginals.flatten()
    names = {c.frame_col: c.name for c in cols}
    cliques = ", ".join(" x ".join(names.get(a, a) for a in m.clique) or "total"
                        for m in marginals)
    entries = [LedgerEntry(
        TABLE_ID, f"Gaussian noise on {len(marginals)} marginals, model fit by mirror "
        "descent (post-processing)",
        f"opendp.extras.polars: contingency_table(algorithm=dp.mbi.{mode.opendp_name})",
        float(min(m.stddev for m in marginals)), 0.0, 0.0, f"all rows; marginals: {cliques}",
        "sequential with the other count queries", ZCDP_ACCOUNTING, rho=rel.table_rho)]
    for r in rel.others:
        entries.append(LedgerEntry(r.id, r.mechanism, r.constructor, r.scale, 0.0, 0.0,
                                   r.scope, r.composition, ZCDP_ACCOUNTING, rho=r.epsilon))
    entries.append(LedgerEntry(
        CONVERSION_ID, "conversion of the counts' total rho-zCDP to (epsilon, delta) (no "
        "noise of its own)", CONVERSION_CONSTRUCTOR, 0.0, rel.epsilon, rel.delta,
        f"every count query: rho {rel.rho:.6g}", "sequential with the selection (epsilons "
        "add)", "(epsilon, delta)-DP from rho-zCDP", rho=rel.rho))
    return entries


# ----- the artifact's counts block (post-processing) ------------------------------------

def counts_section(schema: Schema, counts: CountsConfig, cols: list[ModelColumn],
                   rel: ModelRelease, topics: Mapping[str, Topics]) -> dict[str, Any]:
    """The ``counts`` block: every noisy marginal as released (``model``), and the class
    balance and class-conditional histograms projected from the fitted model (so every
    reader of the "marginals" layout keeps working), each with its standard deviation."""
    table = rel.table
    label = cols[0].frame_col
    n_classes = len(schema.classes)
    balance = np.asarray(table.project((label,)))[:n_classes]
    topics = dict(topics)
    histograms = {}
    for c in cols[1:]:
        proj = np.asarray(table.project((label, c.frame_col)))[:n_classes, :len(c.keys)]
        by_class = tuple(tuple(round(float(v)) for v in row) for row in proj)
        if c.kind == "topic":  # topic x class from the fitted model: candidates draw from it
            if c.name == topic_column(c.field):  # the first slot
                topics[c.field] = replace(topics[c.field], dp_counts_by_class=by_class)
            continue
        f = schema.field(c.field)
        if c.edges is not None:  # merged bins: spread over the public ones (decode's draw)
            by_class = tuple(public_bins(f, c.edges, row) for row in proj)
        histograms[c.field] = Histogram(
            TABLE_ID, c.kind, tuple(f.enum) if f.kind == "categorical" else
            tuple(f.bin_labels()), by_class,
            edges=None if f.kind == "categorical" else tuple(f.bins),
            stddev=_std(table, (label, c.frame_col)))
    balance_rec = ClassBalance(TABLE_ID, tuple(schema.classes),
                               tuple(round(float(v)) for v in balance),
                               float(table.std((label,))))
    return {"signed": True, "class_balance": json_form(balance_rec),
            "histograms": {k: json_form(h) for k, h in histograms.items()},
            "model": model_block(counts.mode, cols, rel),
            **({"topics": {k: json_form(t) for k, t in topics.items()}} if topics else {}),
            **cohort_and_rate_blocks(schema, counts, {r.id: r for r in rel.others})}


def public_bins(f: Field, edges: tuple[float, ...], counts: Any) -> tuple[int, ...]:
    """Counts over merged bins (``edges``) spread over the field's public bins in proportion
    to their grid points, as decode draws a value uniformly in a merged bin."""
    out = []
    for j in range(len(f.bins) - 1):
        k = sum(e <= f.bins[j] for e in edges[1:-1])  # the merged bin holding public bin j
        total = grid_size(f, k, edges)
        out.append(round(float(counts[k]) * grid_size(f, j) / total) if total else 0)
    return tuple(out)


def _std(table: Any, attrs: tuple[str, ...]) -> float | None:
    try:
        return float(table.std(attrs))
    except ValueError:  # no measured marginal covers these columns (MST's tree)
        return None


def model_block(algorithm_name: str, cols: list[ModelColumn], rel: ModelRelease) -> dict:
    """Every released marginal (null cells included), its noise and measure: a reviewer sees
    every number, and decode rebuilds the model from this alone."""
    names = {c.frame_col: c.name for c in cols}
    marginals = tuple(
        artifact_model.ModelMarginal(tuple(names[a] for a in m.clique), float(m.stddev),
                                     tuple(_number(v) for v in
                                           np.asarray(m.noisy_measurement).ravel()))
        for m in rel.table.marginals.flatten())
    return json_form(artifact_model.CountsModel(
        algorithm_name, "zero-concentrated", rel.table_rho, tuple(cols), marginals,
        estimator="mirror_descent", total=float(rel.table.model.total)))


def _number(v: Any) -> int | float:
    """A released cell as it came out of OpenDP: integer noise stays an integer."""
    x = float(v)
    return int(x) if x.is_integer() else x


# ----- the modes ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ModelMode:
    """A counts mode built on OpenDP's contingency tables: one Context in rho-zCDP, the
    artifact's ``counts.model`` block, the ``model`` decoder. A new such mode is one
    instance with its algorithm (`register`)."""

    descriptor: CountsModeDescriptor
    #: the ``dp.mbi`` algorithm's name, for the ledger and messages
    opendp_name: str
    #: AIM and MST: their own accounting can overrun by a ulp (`calibrate_table_slot`)
    adaptive: bool
    #: the mode's ``dp.mbi`` algorithm over the model's columns, from the [counts] settings
    #: and the planned workload (`release.counts.workload`)
    algorithm: Callable[[list[ModelColumn], CountsConfig, Workload | None], Algorithm]
    accountant: str = (
        "a Context compositor in zero-concentrated DP over every count query (the "
        "contingency table's marginals, cohorts, rates: rho adds up), whose total rho "
        "OpenDP converts to (epsilon, delta) at the counts' delta "
        f"({CONVERSION_ID}); zCDP entries state rho, their epsilon is counted in the "
        "conversion entry")

    def measure(self, rows: CountsRows, schema: Schema, counts: CountsConfig,
                budget: CountsBudget) -> MeasuredCounts:
        cols = model_columns(schema, dict(rows.topics), rows.slots, rows.workload)
        rel = release_model(self, rows, schema, counts, cols, budget)
        block = counts_section(schema, counts, cols, rel, dict(rows.topic_blocks))
        return MeasuredCounts(ledger_entries(self, cols, rel), block, rel.epsilon, rel.delta,
                              f"rho-zCDP (rho {rel.rho:.4g}, which OpenDP converts to "
                              f"({rel.epsilon:.4g}, {rel.delta:.3g})-DP)")


def _workload(cols: list[ModelColumn], counts: CountsConfig,
              workload: Workload | None) -> list[Count]:
    return fixed_workload(cols, counts.class_share, counts.topic_share, workload)


#: Fixed: the class balance and the class's 2-way marginal with every column the planned
#: workload measures with it (CoRTeC's), the 1-way marginal of the others
FIXED_MODE = register(ModelMode(FIXED, "Fixed", False, lambda cols, c, w: CalibratedFixed(
    queries=_workload(cols, c, w))))
#: AIM: the Fixed workload as its candidates. OpenDP's AIM spends half its budget on the
#: 1-way marginal of every column unless told otherwise; the AIM paper (and smartnoise's)
#: spends about one round's worth on each (1/16 of the budget at 16 rounds per column), and
#: 8 rounds left it too few to anneal: on the demo's 400 rows the gap fell from 0.34 / 0.32
#: (0.5 and 8 rounds) to 0.13 / 0.13 (docs/release.md, "Counts modes")
AIM_MODE = register(ModelMode(AIM, "AIM", True, lambda cols, c, w: make_aim(
    _workload(cols, c, w), AIM_ONEWAY_SPLIT, c.aim_rounds)))
MST_MODE = register(ModelMode(MST, "MST", True, lambda cols, c, w: make_mst()))
