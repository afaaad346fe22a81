"""Count queries through OpenDP's polars front-end: the release's histograms (Laplace, or
Gaussian in a zCDP Context) and the dataset's size.

Noise is never hand-written and never seeded: each released number comes out of an OpenDP
measurement, and the epsilon recorded for it is what OpenDP's privacy map says. Sensitivity
and noise stay together inside OpenDP (the polars front-end derives the noise scale from
the privacy unit and the budget it is given).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from release.dp import prelude as dp
from release.dp import spools
from release.dp.calibration import calibrate
from release.dp.compat import polars_plan
from release.dp.unit import PrivacyUnit

COUNT_COLUMN = "dp_count"
COUNT_CONSTRUCTOR = "opendp.extras.polars: group_by().agg(dp.len())"
SIZE_CONSTRUCTOR = "opendp.extras.polars: select(dp.len())"


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


@dataclass(frozen=True)
class NoisyCount:
    """One noisy number and its OpenDP accounting."""

    value: int
    mechanism: str
    scale: float
    epsilon: float


def make_context(priv_frame: pl.LazyFrame, unit: PrivacyUnit, budgets: list[float],
                 measure: str = "epsilon") -> dp.Context:
    """A compositor over a frame of u32 key codes (and the unit codes, if any);
    ``budgets`` are the queries' epsilons, or their rhos with ``measure="rho"`` (zCDP:
    Gaussian noise)."""
    types = {pl.UInt32: dp.u32, pl.UInt64: dp.u64, pl.String: dp.String}
    domain = dp.lazyframe_domain([dp.series_domain(name, dp.atom_domain(T=types[dtype]))
                                  for name, dtype in priv_frame.collect_schema().items()])
    # collected: OpenDP runs every query on this plan, which should hold the codes, not the
    # typed rows and the expressions that derived them (42 -> 25 s, 5.1 -> 3.3 GB for the
    # fixed mode's counts of 10^6 rows); shuffled once for `PrivacyUnit.bounded`, then
    # grouped by person (a stable sort: each person's rows stay in the shuffled order),
    # which makes each truncation's pass over the people cheaper
    data = priv_frame.collect()
    if unit.id_field is not None:
        data = (data.sample(fraction=1.0, shuffle=True)
                .sort(unit.id_field, maintain_order=True))
    return spools.make_spooled_context(data, domain=domain, privacy_unit=unit.opendp_unit(),
                                       privacy_loss=dp.loss_of(**{measure: sum(budgets)}),
                                       split_by_weights=budgets)


def _make_calibrated(ctx: dp.Context, query: Any) -> dp.Measurement:
    """``query``'s measurement at the next budget slot of ``ctx``: the scale comes from
    OpenDP's map (`calibrate`); the Context checks it again when the query is submitted."""
    plan = polars_plan(query)  # the LazyFrame plan OpenDP checks
    domain, metric = ctx.accountant.input_space

    def make(scale: float) -> dp.Measurement:
        return dp.m.make_private_lazyframe(domain, metric, ctx.accountant.output_measure,
                                           lazyframe=plan, global_scale=scale)

    return calibrate(make, ctx.d_in, float(ctx.d_mids[0]))[0]


def make_count(ctx: dp.Context, unit: PrivacyUnit, q: CountQuery) -> dp.Measurement:
    """The OpenDP measurement of one count query, calibrated to the next budget slot of ``ctx``.

    The plan: truncation per person (if any), group-by count, join on the public keys.
    """
    query = (unit.bounded(ctx.query()).group_by(list(q.by))
             .agg(dp.len(signed=True).alias(COUNT_COLUMN))
             .join(q.keys.lazy(), on=list(q.by), how="right"))
    return _make_calibrated(ctx, query)


def measure_count(ctx: dp.Context, unit: PrivacyUnit, q: CountQuery) -> NoisyCounts:
    """Run count query ``q`` in ``ctx``'s next slot: its noisy counts and OpenDP's accounting
    (``epsilon`` holds the slot's measure: rho in a zCDP Context)."""
    measurement = make_count(ctx, unit, q)
    summary = dp.summarize_polars_measurement(measurement)
    table = ctx(measurement).collect().select([*q.by, COUNT_COLUMN])
    return NoisyCounts(
        id=q.id, table=table, constructor=COUNT_CONSTRUCTOR,
        mechanism=str(summary["distribution"][0]), scale=float(summary["scale"][0]),
        epsilon=float(measurement.map(ctx.d_in)), scope=q.scope, composition=q.composition)


def make_size(ctx: dp.Context, unit: PrivacyUnit) -> dp.Measurement:
    """The number of rows after each person's rows are cut to their bound, calibrated to
    the next budget slot of ``ctx``."""
    return _make_calibrated(
        ctx, unit.bounded(ctx.query()).select(dp.len(signed=True).alias(COUNT_COLUMN)))


def measure_size(priv_frame: pl.LazyFrame, unit: PrivacyUnit, epsilon: float) -> NoisyCount:
    """The number of rows after each person's rows are cut to their bound, released with
    OpenDP's integer Laplace at ``epsilon`` (pure DP) through a Context of its own: what
    the release's plan is sized by."""
    names = priv_frame.collect_schema().names()
    frame = priv_frame.select(unit.id_field if unit.id_field is not None else names[0])
    ctx = make_context(frame, unit, [epsilon])
    measurement = make_size(ctx, unit)
    summary = dp.summarize_polars_measurement(measurement)
    value = int(ctx(measurement).collect()[COUNT_COLUMN][0])
    return NoisyCount(value, str(summary["distribution"][0]), float(summary["scale"][0]),
                      float(measurement.map(ctx.d_in)))


def release_counts(priv_frame: pl.LazyFrame, unit: PrivacyUnit,
                   queries: list[CountQuery]) -> CountsRelease:
    """Run every count query through one OpenDP compositor (sequential composition).

    ``priv_frame`` holds the private rows plus derived public-key columns (class, bin,
    cohort...) computed row by row, which keeps neighbouring datasets neighbouring.
    Joining each grouped count onto the full public key set (OpenDP's key sanitizer)
    releases every key, empty ones included, so the released keys never depend on data.
    """
    ctx = make_context(priv_frame, unit, [q.epsilon for q in queries])
    results = [measure_count(ctx, unit, q) for q in queries]
    spent = float(sum(ctx.current_privacy_loss()))
    return CountsRelease(results, spent)
