"""Counts as a graphical model: OpenDP's contingency tables (``opendp.extras.mbi``) in zCDP.

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
run on public dummy data; every key set gets a null cell last, which no row reaches and
decode never samples.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import opendp.prelude as dp
import polars as pl

from release.config import ReleaseConfig
from release.counts import (
    CLASS_COL,
    cohort_query,
    cohorts_block,
    key_col,
    public_values,
    rate_block,
    rate_queries,
)
from release.ledger import LedgerEntry
from release.opendp_compat import mbi_helpers
from release.opendp_mechanisms import (
    CONVERSION_CONSTRUCTOR,
    CountQuery,
    NoisyCounts,
    PrivacyUnit,
    count_measurement,
    new_context,
    post_processing,
    to_approx_dp_of_rho,
    zcdp_budget,
)
from selpe_audit.artifact.model_block import TOPIC_PREFIX, topic_column
from selpe_audit.errors import UserError
from selpe_audit.schema import Schema

TABLE_ID = "counts/model"
CONVERSION_ID = "counts/zcdp-to-approx-dp"
ZCDP_ACCOUNTING = "rho-zCDP"
#: AIM/MST get a slot a hair under theirs when their own accounting overruns by a ulp
UPSTREAM_SLACK = 1e-9


def topic_col(name: str, slot: int = 1) -> str:
    """The private frame's column of a text field's topic code (in slot ``slot``): the
    model column's name ("topic:F#2") as a private column ("__topic_F#2")."""
    return "__topic_" + topic_column(name, slot).removeprefix(TOPIC_PREFIX)


@dataclass(frozen=True)
class ModelColumn:
    """One variable of the model: its name in the artifact, its frame column, its keys."""

    name: str          # artifact name: the field's name, or "topic:<field>"
    field: str         # the schema field it describes
    kind: str          # "class" | "categories" | "bins" | "topic"
    frame_col: str     # the column of public-key codes in the private frame
    keys: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "field": self.field, "kind": self.kind,
                "keys": list(self.keys)}


def model_columns(schema: Schema, topics: dict[str, int],
                  slots: Mapping[str, int] | None = None) -> list[ModelColumn]:
    """The class first, then every categorical or numeric field, then each text topic (a
    keyword field: one per slot, ``slots[field]``)."""
    cols = [ModelColumn(schema.label, schema.label, "class", CLASS_COL,
                        tuple(str(c) for c in schema.classes))]
    for f in schema.record_fields:
        if f.kind in ("categorical", "numeric") and f.name != schema.label:
            cols.append(ModelColumn(f.name, f.name,
                                    "categories" if f.kind == "categorical" else "bins",
                                    key_col(f.name), tuple(public_values(f))))
    for name, k in topics.items():
        cols.extend(ModelColumn(topic_column(name, s), name, "topic", topic_col(name, s),
                                tuple(str(j) for j in range(k)))
                    for s in range(1, (slots or {}).get(name, 1) + 1))
    return cols


def fixed_workload(cols: list[ModelColumn], class_share: float,
                   topic_share: float) -> list[dp.mbi.Count]:
    """The class balance and the class's 2-way marginal with every other column, weighted
    so that the class balance gets ``class_share`` of the rho and the free-text topics
    together ``topic_share`` (split evenly; without topics it goes to the fields), the
    fields the rest, evenly (Fixed gives query i the scale ``scale / weight_i``, so its rho
    is proportional to weight_i squared). A topic x class table has many cells, and the
    text's label signal lives in it alone: an even split would leave it mostly noise."""
    label, others = cols[0].frame_col, cols[1:]
    if not others:
        return [dp.mbi.Count((label,))]
    n_topics = sum(c.kind == "topic" for c in others)
    n_fields = len(others) - n_topics
    if n_topics and n_fields:
        topic_rho, field_rho = topic_share / n_topics, (1 - class_share - topic_share) / n_fields
    else:  # one kind of column: it gets all but the class's share, evenly
        topic_rho = field_rho = (1 - class_share) / len(others)
    rho = [topic_rho if c.kind == "topic" else field_rho for c in others]  # shares of rho
    unit = min(rho)
    return [dp.mbi.Count((label,), weight=math.sqrt(class_share / unit)),
            *(dp.mbi.Count((label, c.frame_col), weight=math.sqrt(r / unit))
              for c, r in zip(others, rho, strict=True))]


@dataclass(kw_only=True, frozen=True)
class CalibratedFixed(dp.mbi.Fixed):
    """OpenDP's ``Fixed`` with its scale found from OpenDP's map in two builds.

    ``Fixed`` binary-searches the noise scale (~60 builds of the whole marginals chain: 30 s
    for the demo's 14 marginals on 2 cores). The chain's zCDP map is rho(1) / scale^2, so one
    probe at scale 1 gives the scale, and OpenDP's map of the final chain is checked against
    the slot. The chain and the model fit are Fixed's own (OpenDP parts, mbi's estimator).
    """

    def make_marginals(self, input_domain: Any, input_metric: Any, output_measure: Any,
                       d_in: Any, d_out: float, *, marginals: Any, model: Any) -> Any:
        from mbi import Domain

        mbi = mbi_helpers()
        get_associated_metric, get_cardinalities = (mbi.get_associated_metric,
                                                    mbi.get_cardinalities)
        make_stable_marginals, then_noise_marginals = (mbi.make_stable_marginals,
                                                       mbi.then_noise_marginals)

        if output_measure != dp.zero_concentrated_divergence() or model is not None:
            return super().make_marginals(input_domain, input_metric, output_measure, d_in,
                                          d_out, marginals=marginals, model=model)
        cliques = [q.by for q in self.queries]
        weights = [q.weight for q in self.queries]
        stable = make_stable_marginals(input_domain, input_metric,
                                       get_associated_metric(output_measure), cliques)

        def make(scale: float) -> dp.Measurement:
            return stable >> then_noise_marginals(output_measure, cliques, scale, weights)

        scale = math.sqrt(float(make(1.0).map(d_in)) / d_out) * (1 + 1e-9)
        measured = make(scale)
        if measured.map(d_in) > d_out:
            raise RuntimeError("OpenDP calibration of the marginals exceeded their rho")
        domain = Domain.fromdict(get_cardinalities(input_domain))

        def fit(new_releases: list) -> tuple[Any, Any]:
            all_marginals = marginals.add(*new_releases)
            return all_marginals, self.estimator(domain, all_marginals.flatten(),
                                                 potentials=None)

        return measured >> post_processing(fit)


def algorithm(mode: str, cols: list[ModelColumn], cfg: ReleaseConfig) -> dp.mbi.Algorithm:
    """The mode's OpenDP algorithm. AIM gets the label-weighted Fixed workload as its
    candidates, and a bound on rounds so that it finishes in minutes."""
    workload = fixed_workload(cols, cfg.counts.class_share, cfg.counts.topic_share)
    if mode == "fixed":
        return CalibratedFixed(queries=workload)
    if mode == "aim":
        return dp.mbi.AIM(queries=workload, rounds=cfg.counts.aim_rounds)
    if mode == "mst":
        return dp.mbi.MST()
    raise ValueError(f"not a model counts mode: {mode}")


@dataclass(frozen=True)
class ModelRelease:
    """What the counts stage released in a model mode, and its accounting."""

    table: Any                      # opendp ContingencyTable (noisy marginals + fitted model)
    table_rho: float
    others: list[NoisyCounts]       # cohorts and rates (Gaussian)
    rho: float
    epsilon: float
    delta: float


def release_model(priv_frame: pl.LazyFrame, unit: PrivacyUnit, schema: Schema,
                  cfg: ReleaseConfig, cols: list[ModelColumn],
                  budget: tuple[float, float] | None = None) -> ModelRelease:
    """Every count of the release through one OpenDP Context in rho-zCDP, at ``budget``
    (epsilon, delta; default: the counts' whole budget)."""
    counts = cfg.counts
    gamma = counts.gamma if counts.cohorts else 0.0
    alpha = counts.alpha if counts.rates else 0.0
    epsilon, delta = budget or (cfg.budget.counts_epsilon, cfg.counts_delta)
    (rho,) = zcdp_budget(epsilon, delta, [1.0])
    others = ([cohort_query(schema, cfg, rho * gamma)] if counts.cohorts else []) + \
        rate_queries(schema, cfg, rho * alpha)
    table_slot = rho * (1 - gamma - alpha)
    if counts.mode in ("aim", "mst"):
        table_slot = _working_slot(priv_frame, unit, cols, cfg, table_slot)
    slots = [table_slot, *(q.epsilon for q in others)]
    if table_slot < rho * (1 - gamma - alpha):  # the unspent hair: never queried
        slots.append(rho * (1 - gamma - alpha) - table_slot)
    ctx = new_context(priv_frame, unit, slots, measure="rho")
    measurement = _table_query(ctx, unit, cols, cfg)
    table_rho = float(measurement.map(ctx.d_in))  # OpenDP's map (the Context checks it too)
    try:
        table = ctx(measurement)
    except dp.OpenDPException as e:
        if "insufficient budget" not in str(e):
            raise
        raise UserError(f"counts mode '{counts.mode}': OpenDP's {_algo_name(cfg)} overran "
                        "its budget by a float rounding error (opendp issue 2789) on a "
                        "data-dependent path; nothing was released, the reservation is "
                        "charged - use counts.mode = \"fixed\"") from None
    results = [_gaussian_counts(ctx, unit, q) for q in others]
    spent = table_rho + sum(r.epsilon for r in results)  # NoisyCounts.epsilon holds rho here
    if spent > rho * (1 + 1e-9):
        raise RuntimeError("OpenDP accounting of the counts exceeds their rho")
    eps, delta = to_approx_dp_of_rho(rho, delta)
    return ModelRelease(table, table_rho, results, rho, eps, delta)


def _table_query(ctx: dp.Context, unit: PrivacyUnit, cols: list[ModelColumn],
                 cfg: ReleaseConfig) -> dp.Measurement:
    """The contingency table measurement at the context's next slot (after truncation to
    each person's bound, if the unit is a person)."""
    return (unit.bounded(ctx.query()).select(*[c.frame_col for c in cols])
            .contingency_table(keys={c.frame_col: list(range(len(c.keys))) for c in cols},
                               algorithm=algorithm(cfg.counts.mode, cols, cfg))
            .resolve())


def _working_slot(priv_frame: pl.LazyFrame, unit: PrivacyUnit, cols: list[ModelColumn],
                  cfg: ReleaseConfig, slot: float) -> float:
    """A slot at most ``slot`` on which AIM/MST's own accounting does not overrun (opendp
    issue 2789: "insufficient budget for query: 0.0999... > 0.0999..."): dry runs on a
    public all-zero frame of the same columns, shrinking the slot by a hair until one
    passes. The overrun is float arithmetic on the budget alone (MST's schedule never
    depends on the data), so this spends slightly less, never more."""
    dummy = pl.DataFrame({name: pl.Series([0] * 8, dtype=dtype) if dtype != pl.String
                          else pl.Series([str(i) for i in range(8)])
                          for name, dtype in priv_frame.collect_schema().items()}).lazy()
    for k in range(12):
        trial = slot * (1 - UPSTREAM_SLACK * (2 ** k - 1))
        ctx = new_context(dummy, unit, [trial], measure="rho")
        try:
            ctx(_table_query(ctx, unit, cols, cfg))
            return trial
        except dp.OpenDPException as e:
            if "insufficient budget" not in str(e):
                raise
    raise RuntimeError(f"OpenDP's {cfg.counts.mode} overran every slot tried")


def _gaussian_counts(ctx: dp.Context, unit: PrivacyUnit, q: CountQuery) -> NoisyCounts:
    measurement = count_measurement(ctx, unit, q)
    summary = dp.summarize_polars_measurement(measurement)
    table = ctx(measurement).collect().select([*q.by, "dp_count"])
    return NoisyCounts(id=q.id, table=table,
                       constructor="opendp.extras.polars: group_by().agg(dp.len())",
                       mechanism=str(summary["distribution"][0]),
                       scale=float(summary["scale"][0]),
                       epsilon=float(measurement.map(ctx.d_in)), scope=q.scope,
                       composition=q.composition)


# ----- ledger ----------------------------------------------------------------------------

def ledger_entries(cfg: ReleaseConfig, cols: list[ModelColumn],
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
        f"opendp.extras.polars: contingency_table(algorithm=dp.mbi.{_algo_name(cfg)})",
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


def _algo_name(cfg: ReleaseConfig) -> str:
    return {"fixed": "Fixed", "aim": "AIM", "mst": "MST"}[cfg.counts.mode]


# ----- the artifact's counts block (post-processing) ------------------------------------

def counts_section(schema: Schema, cfg: ReleaseConfig, cols: list[ModelColumn],
                   rel: ModelRelease, topics: dict[str, Any]) -> dict[str, Any]:
    """The ``counts`` block: every noisy marginal as released (``model``), and the class
    balance and class-conditional histograms projected from the fitted model (so every
    reader of the "marginals" layout keeps working), each with its standard deviation."""
    table = rel.table
    label = cols[0].frame_col
    n_classes = len(schema.classes)
    balance = np.asarray(table.project((label,)))[:n_classes]
    out: dict[str, Any] = {
        "signed": True,
        "mode": cfg.counts.mode,
        "class_balance": {
            "mechanism_id": TABLE_ID,
            "classes": list(schema.classes),
            "dp_counts": [round(float(v)) for v in balance],
            "stddev": float(table.std((label,))),
        },
        "histograms": {},
    }
    topics = {name: dict(t) for name, t in topics.items()}
    for c in cols[1:]:
        proj = np.asarray(table.project((label, c.frame_col)))[:n_classes, :len(c.keys)]
        if c.kind == "topic":  # topic x class from the fitted model: candidates draw from it
            if c.name == topic_column(c.field):  # the first slot
                topics[c.field]["dp_counts_by_class"] = [[round(float(v)) for v in row]
                                                         for row in proj]
            continue
        f = schema.field(c.field)
        out["histograms"][c.field] = {
            "mechanism_id": TABLE_ID,
            "kind": c.kind,
            "keys": list(f.enum) if f.kind == "categorical" else list(c.keys),
            "edges": None if f.kind == "categorical" else list(f.bins),
            "dp_counts_by_class": [[round(float(v)) for v in row] for row in proj],
            "stddev": _std(table, (label, c.frame_col)),
        }
    out["model"] = model_block(cfg, cols, rel)
    if topics:
        out["topics"] = topics
    results = {r.id: r for r in rel.others}
    if cfg.counts.cohorts:
        out["cohorts"] = cohorts_block(schema, cfg, results["counts/cohorts"])
    if cfg.counts.rates:
        out["rates"] = [rate_block(schema, cfg, i, r, results[f"counts/rates/{i}"])
                        for i, r in enumerate(cfg.counts.rates)]
    return out


def _std(table: Any, attrs: tuple[str, ...]) -> float | None:
    try:
        return float(table.std(attrs))
    except ValueError:  # no measured marginal covers these columns (MST's tree)
        return None


def model_block(cfg: ReleaseConfig, cols: list[ModelColumn], rel: ModelRelease) -> dict:
    """Every released marginal (null cells included), its noise and measure: a reviewer sees
    every number, and decode rebuilds the model from this alone."""
    names = {c.frame_col: c.name for c in cols}
    marginals = []
    for m in rel.table.marginals.flatten():
        values = np.asarray(m.noisy_measurement).ravel()
        marginals.append({"clique": [names[a] for a in m.clique],
                          "stddev": float(m.stddev),
                          "values": [_number(v) for v in values]})
    return {"algorithm": cfg.counts.mode, "measure": "zero-concentrated", "rho": rel.table_rho,
            "estimator": "mirror_descent", "columns": [c.to_json() for c in cols],
            "marginals": marginals, "total": float(rel.table.model.total)}



def _number(v: Any) -> int | float:
    """A released cell as it came out of OpenDP: integer noise stays an integer."""
    x = float(v)
    return int(x) if x.is_integer() else x
