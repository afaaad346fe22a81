"""Thresholded counts of keys not given in advance (OpenDP's partition selection): the
phrase vocabulary's terms (`release.phrases`), and the search for their threshold.

Each term's count gets integer noise and only terms whose noisy count clears OpenDP's
threshold are released, which is (epsilon, delta)-DP: delta bounds the chance that a term
few units hold gets through. The input is a frame of one row per (unit, term): `UNIT_COL`
(a u32 unit code) and `TERM_COL` (the term's text).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from release.dp import prelude as dp
from release.dp import spools
from release.dp.compat import polars_plan
from release.dp.counts import COUNT_COLUMN
from release.dp.unit import UNIT_COL

TERM_COL = "__phrase"


@dataclass(frozen=True)
class PartitionCounts:
    """The released terms (`TERM_COL`, ``dp_count``) and OpenDP's accounting of them."""

    table: pl.DataFrame
    mechanism: str
    scale: float
    threshold: int
    epsilon: float
    delta: float


def make_partition_counts(frame: pl.LazyFrame, epsilon: float, delta: float,
                          per_unit: int) -> tuple[dp.Context, dp.Measurement]:
    """The OpenDP Context over a (unit, term) frame and its measurement at (epsilon, delta):
    the release runs it once through the Context (`release_partition_counts`); the
    mechanism audit invokes it many times."""
    domain = dp.lazyframe_domain([dp.series_domain(UNIT_COL, dp.atom_domain(T=dp.u32)),
                                  dp.series_domain(TERM_COL, dp.atom_domain(T=dp.String))])
    # a person (or a row) is one unit; its rows are bounded below, inside OpenDP
    ctx = spools.make_spooled_context(
        frame.collect(), domain=domain,
        privacy_unit=dp.unit_of(contributions=1, identifier=pl.col(UNIT_COL)),
        privacy_loss=dp.loss_of(epsilon=epsilon, delta=delta), split_evenly_over=1)
    # one row per (unit, term), then the unit's first per_unit rows - its texts in row order,
    # each text's words before its word pairs: a text's leading words (its head: "fever",
    # "cough") gather counts where a random choice spreads them (23 keywords released on
    # 5,000 demo rows at epsilon 0.4, against 4 for a random 2) - (not truncate_num_groups:
    # in OpenDP 0.16 its "first" keeps k - 1 groups, polars' rank starting at 1, and its
    # "sample" fails to plan on a single text column)
    # (the first step keeps any one of a unit's identical (unit, term) rows: "first" costs a
    # fifth of "sample"'s shuffle per group in memory at 10^6 rows, for the same counts)
    query = (ctx.query().truncate_per_group(1, by=[TERM_COL], keep="first")
             .truncate_per_group(per_unit, keep="first")
             .group_by(TERM_COL).agg(dp.len(signed=False).alias(COUNT_COLUMN)))
    return ctx, _calibrate_threshold(ctx, query, epsilon, delta)


def threshold_of(measurement: dp.Measurement) -> int:
    """OpenDP's release threshold of a `make_partition_counts` measurement."""
    return int(dp.summarize_polars_measurement(measurement)["threshold"][0])


def partition_threshold(epsilon: float, delta: float, per_unit: int) -> int:
    """OpenDP's release threshold at (epsilon, delta) with ``per_unit`` terms per unit:
    public (it depends on neither the rows nor the texts), read off the measurement built
    over one public dummy row."""
    dummy = pl.DataFrame({UNIT_COL: pl.Series([0], dtype=pl.UInt32), TERM_COL: ["-"]}).lazy()
    _, measurement = make_partition_counts(dummy, epsilon, delta, per_unit)
    return threshold_of(measurement)


def release_partition_counts(ctx: dp.Context,
                             measurement: dp.Measurement) -> PartitionCounts:
    """Run ``measurement`` once through ``ctx``: the terms over the threshold with their
    noisy counts, and what OpenDP's Context says was spent."""
    table = ctx(measurement).collect()
    summary = dp.summarize_polars_measurement(measurement)
    spent = [sum(loss) for loss in zip(*ctx.current_privacy_loss(), strict=True)]
    return PartitionCounts(table, str(summary["distribution"][0]), float(summary["scale"][0]),
                           int(summary["threshold"][0]), float(spent[0]), float(spent[1]))


def _calibrate_threshold(ctx: dp.Context, query: Any, epsilon: float,
                         delta: float) -> dp.Measurement:
    """The query's measurement at (epsilon, delta) from OpenDP's own map, without its
    generic binary search over the scale (~5 s): the Laplace count's epsilon is linear in
    1/scale (one probe at scale 1 gives the scale), and delta falls as the threshold rises
    (an integer bisection over cheap builds finds the smallest threshold that fits)."""
    plan = polars_plan(query)  # the LazyFrame plan OpenDP checks
    domain, metric = ctx.accountant.input_space
    measure = ctx.accountant.output_measure

    def make(scale: float, threshold: int) -> dp.Measurement:
        return dp.m.make_private_lazyframe(domain, metric, measure, lazyframe=plan,
                                           global_scale=scale, threshold=threshold)

    scale = float(make(1.0, 1 << 30).map(ctx.d_in)[0]) / epsilon * (1 + 1e-12)
    low, high = 1, 2  # OpenDP needs a threshold above 1
    while make(scale, high).map(ctx.d_in)[1] > delta:  # doubling: an upper bound
        low, high = high, high * 2
    while high - low > 1:  # smallest threshold whose delta fits
        mid = (low + high) // 2
        low, high = (low, mid) if make(scale, mid).map(ctx.d_in)[1] <= delta else (mid, high)
    measurement = make(scale, high)
    eps_m, delta_m = measurement.map(ctx.d_in)
    if eps_m > epsilon or delta_m > delta:
        raise RuntimeError("OpenDP calibration of the phrases exceeded their budget")
    return measurement
