"""OpenDP's contingency tables (``opendp.extras.mbi``) as the model counts modes run them
(`release.counts.model`): the marginal queries and table algorithms, ``Fixed`` with its scale
calibrated from OpenDP's map (`CalibratedFixed`), the table measurement at a Context's slot
(`make_table_query`), and the slot AIM's and MST's own accounting does not overrun
(`calibrate_table_slot`). The model's columns, budget split and artifact block stay there."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import polars as pl

from release.dp import prelude as dp
from release.dp.calibration import calibrate
from release.dp.compat import mbi_helpers, pgm
from release.dp.counts import make_context
from release.dp.unit import PrivacyUnit
from release.dp.user import make_post_processing

#: OpenDP's marginal query (a clique of frame columns, and its weight)
Count = dp.mbi.Count
#: OpenDP's table algorithm (Fixed, AIM, MST), for annotations
Algorithm = dp.mbi.Algorithm
#: AIM/MST get a slot a hair under theirs when their own accounting overruns by a ulp
UPSTREAM_SLACK = 1e-9


class TableColumn(Protocol):
    """A column of the table (`release.counts.model.ModelColumn`): its frame column and its
    public keys, coded 0..len - 1 in that column."""

    @property
    def frame_col(self) -> str: ...

    @property
    def keys(self) -> tuple[Any, ...]: ...


@dataclass(kw_only=True, frozen=True)
class CalibratedFixed(dp.mbi.Fixed):
    """OpenDP's ``Fixed`` with its scale found by `release.dp.calibration.calibrate`.

    ``Fixed`` binary-searches the noise scale (~60 builds of the whole marginals chain: 30 s
    for the demo's 14 marginals on 2 cores); `calibrate` needs two. The chain and the model
    fit are Fixed's own (OpenDP parts, mbi's estimator).
    """

    def make_marginals(self, input_domain: Any, input_metric: Any, output_measure: Any,
                       d_in: Any, d_out: float, *, marginals: Any, model: Any) -> Any:
        Domain = pgm().Domain

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

        measured, _ = calibrate(make, d_in, d_out)
        domain = Domain.fromdict(get_cardinalities(input_domain))

        def fit(new_releases: list) -> tuple[Any, Any]:
            all_marginals = marginals.add(*new_releases)
            return all_marginals, self.estimator(domain, all_marginals.flatten(),
                                                 potentials=None)

        return measured >> make_post_processing(fit)


def make_table_query(ctx: dp.Context, unit: PrivacyUnit, cols: Sequence[TableColumn],
                     algo: Algorithm) -> dp.Measurement:
    """The contingency table measurement at the context's next slot (after truncation to
    each person's bound, if the unit is a person): the release's, and the mechanism
    audit's with its own copy of the algorithm."""
    return (unit.bounded(ctx.query()).select(*[c.frame_col for c in cols])
            .contingency_table(keys={c.frame_col: list(range(len(c.keys))) for c in cols},
                               algorithm=algo)
            .resolve())


def calibrate_table_slot(priv_frame: pl.LazyFrame, unit: PrivacyUnit,
                         cols: Sequence[TableColumn], algo: Algorithm, slot: float) -> float:
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
        ctx = make_context(dummy, unit, [trial], measure="rho")
        try:
            ctx(make_table_query(ctx, unit, cols, algo))
            return trial
        except dp.OpenDPException as e:
            if "insufficient budget" not in str(e):
                raise
    raise RuntimeError(f"OpenDP's {type(algo).__name__} overran every slot tried")


def make_aim(queries: list[Count], oneway_split: float, rounds: int | None) -> Algorithm:
    """OpenDP's AIM with ``queries`` as its candidates (``rounds`` None: OpenDP's own)."""
    return dp.mbi.AIM(queries=queries, oneway_split=oneway_split, rounds=rounds)


def make_mst() -> Algorithm:
    """OpenDP's MST with its defaults."""
    return dp.mbi.MST()
