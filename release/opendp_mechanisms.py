"""Every OpenDP call of the release lives here.

Noise is never hand-written and never seeded: each released number comes out of an OpenDP
measurement, and the epsilon recorded for it is what OpenDP's privacy map says. Sensitivity
and noise stay together inside OpenDP (the polars front-end derives the noise scale from
the privacy unit and the budget it is given).
"""

from __future__ import annotations

from dataclasses import dataclass

import opendp.prelude as dp
import polars as pl

dp.enable_features("contrib")

COUNT_COLUMN = "dp_count"


@dataclass(frozen=True)
class PrivacyUnit:
    """Rows (``id_field`` None) or people whose rows OpenDP truncates to ``max_contributions``."""

    id_field: str | None = None
    max_contributions: int = 1

    def opendp_unit(self) -> tuple:
        if self.id_field is None:
            return dp.unit_of(contributions=1)
        return dp.unit_of(contributions=1, identifier=pl.col(self.id_field))


@dataclass(frozen=True)
class CountQuery:
    """Counts of rows per public key combination; every key of ``keys`` is released."""

    id: str
    by: tuple[str, ...]
    keys: pl.DataFrame
    epsilon: float
    scope: str
    composition: str


@dataclass(frozen=True)
class NoisyCounts:
    """One measurement's output (``dp_count`` per key) and its OpenDP accounting."""

    id: str
    table: pl.DataFrame
    constructor: str
    mechanism: str
    scale: float
    epsilon: float
    scope: str
    composition: str


@dataclass(frozen=True)
class CountsRelease:
    results: list[NoisyCounts]
    total_epsilon: float
    budget_epsilon: float


def count_measurement(ctx: dp.Context, unit: PrivacyUnit, q: CountQuery) -> dp.Measurement:
    """The OpenDP measurement of one count query, calibrated to the next budget slot of ``ctx``.

    The plan: truncation per person (if any), group-by count, join on the public keys.
    Calibration uses OpenDP's own privacy map instead of its generic binary search (which
    builds ~60 measurements): the map of a Laplace count is linear in 1/scale, so one probe
    at scale 1 gives the scale for the slot, and OpenDP's map of the final measurement is
    checked against the slot (the Context checks it again when the query is submitted).
    """
    query = ctx.query()
    if unit.id_field is not None:
        query = query.truncate_per_group(unit.max_contributions)
    query = (query.group_by(list(q.by))
             .agg(dp.len(signed=True).alias(COUNT_COLUMN))
             .join(q.keys.lazy(), on=list(q.by), how="right"))
    plan = object.__getattribute__(query, "polars_plan")  # the LazyFrame plan OpenDP checks
    domain, metric = ctx.accountant.input_space

    def make(scale: float) -> dp.Measurement:
        return dp.m.make_private_lazyframe(domain, metric, ctx.accountant.output_measure,
                                           lazyframe=plan, global_scale=scale)

    slot = float(ctx.d_mids[0])
    scale = float(make(1.0).map(ctx.d_in)) / slot * (1 + 1e-12)
    measurement = make(scale)
    if measurement.map(ctx.d_in) > slot:
        raise RuntimeError("OpenDP calibration exceeded its budget slot")
    return measurement


def new_context(priv_frame: pl.LazyFrame, unit: PrivacyUnit, epsilons: list[float]) -> dp.Context:
    return dp.Context.compositor(
        data=priv_frame,
        privacy_unit=unit.opendp_unit(),
        privacy_loss=dp.loss_of(epsilon=sum(epsilons)),
        split_by_weights=epsilons,
    )


def release_counts(priv_frame: pl.LazyFrame, unit: PrivacyUnit,
                   queries: list[CountQuery]) -> CountsRelease:
    """Run every count query through one OpenDP compositor (sequential composition).

    ``priv_frame`` holds the private rows plus derived public-key columns (class, bin,
    cohort...) computed row by row, which keeps neighbouring datasets neighbouring.
    Joining each grouped count onto the full public key set (OpenDP's key sanitizer)
    releases every key, empty ones included, so the released keys never depend on data.
    """
    ctx = new_context(priv_frame, unit, [q.epsilon for q in queries])
    results = []
    for q in queries:
        measurement = count_measurement(ctx, unit, q)
        summary = dp.summarize_polars_measurement(measurement)
        table = ctx(measurement).collect().select([*q.by, COUNT_COLUMN])
        results.append(NoisyCounts(
            id=q.id, table=table, constructor="opendp.extras.polars: group_by().agg(dp.len())",
            mechanism=str(summary["distribution"][0]), scale=float(summary["scale"][0]),
            epsilon=float(measurement.map(ctx.d_in)), scope=q.scope,
            composition=q.composition))
    spent = float(sum(ctx.current_privacy_loss()))
    return CountsRelease(results, spent, float(ctx.accountant.map(ctx.d_in)))
