"""The selection's pure-DP mechanisms: SelPE's per-batch noisy max over utilities in
[-1, 0], its parallel batches, and the adaptive compositor over rounds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from release.dp import prelude as dp
from release.dp.calibration import calibrate
from release.dp.user import PRIVATE_DOMAIN, SELPE_DOMAIN, user_defined, user_domain

NOISY_MAX_CONSTRUCTOR = (
    "opendp.transformations.make_user_transformation (one class per unit, stability 1) >> "
    "per batch: make_user_transformation (utilities in [-1, 0], L-inf) >> "
    "opendp.measurements.then_noisy_max (MaxDivergence, non-monotone L-inf); batches and "
    "classes in parallel")


def utility_metric() -> dp.Metric:
    """Utilities u_i(s) = -g(center_i, s) lie in [-1, 0], so one privacy unit (which sits in a
    single batch) moves a batch's score vector by at most 1 in L-infinity, in either
    direction: the scores are *not* monotone."""
    return dp.linf_distance(T=float, monotonic=False)


def make_noisy_max(n_candidates: int, scale: float) -> dp.Measurement:
    """OpenDP's report-noisy-max (MaxDivergence) over ``n_candidates`` utilities."""
    domain = dp.vector_domain(dp.atom_domain(T=float, nan=False), size=n_candidates)
    return dp.m.make_noisy_max(domain, utility_metric(), dp.max_divergence(), scale=scale)


def calibrate_noisy_max_scale(n_candidates: int, epsilon: float) -> float:
    """The scale whose OpenDP privacy map at L-inf distance 1 is <= epsilon (2 / epsilon)."""
    return calibrate(lambda s: make_noisy_max(n_candidates, s), 1.0, epsilon)[1]


def make_calibrated_noisy_max(n_candidates: int, epsilon: float) -> dp.Measurement:
    """Noisy max calibrated by OpenDP's privacy map to ``epsilon`` at L-inf distance 1.

    For non-monotone scores OpenDP's map is eps = 2 d_in / scale, so the scale found is
    2 / epsilon (the SelPE paper's exp(eps u) sampling would be 2 eps-DP; we do not copy it).
    """
    return make_noisy_max(n_candidates, calibrate_noisy_max_scale(n_candidates, epsilon))


def make_pure_compositor(epsilons: list[float]) -> dp.Measurement:
    """Adaptive composition over rounds: each round's candidates depend on earlier winners."""
    return dp.c.make_adaptive_composition(user_domain(PRIVATE_DOMAIN), dp.symmetric_distance(),
                                          dp.max_divergence(), d_in=1, d_mids=list(epsilons))


def make_selection_round(epsilon: float, function: Callable[[Any], Any]) -> dp.Measurement:
    """A round as one user measurement with map epsilon * d_in, for a mode whose whole
    round ``function`` is epsilon-DP per unit by its own argument (selpe builds its round
    from OpenDP parts instead: `make_batch_selector`, `make_parallel_batches`)."""
    with user_defined():
        return dp.m.make_user_measurement(
            user_domain(PRIVATE_DOMAIN), dp.symmetric_distance(), dp.max_divergence(),
            function=function, privacy_map=lambda d_in: epsilon * d_in, TO="ExtrinsicObject")


def make_one_class_per_unit(apply_rule: Callable[[Any], Any]) -> dp.Transformation:
    """The private input -> SelPE's input (``apply_rule``: the `OneClassPerUnit` constructor).

    The rule keeps each unit's rows of one class, chosen from that unit's rows alone, so
    d_in units added or removed change at most d_in units of the output: stability 1.
    """
    with user_defined():
        return dp.t.make_user_transformation(
            user_domain(PRIVATE_DOMAIN), dp.symmetric_distance(), user_domain(SELPE_DOMAIN),
            dp.symmetric_distance(), function=apply_rule, stability_map=lambda d_in: d_in)


def make_batch_selector(utilities: Callable[[Any], Any], n_candidates: int,
                        scale: float) -> dp.Measurement:
    """One batch: SelPE's input -> the batch's utilities (a stable transformation) chained
    with OpenDP's noisy max (``then_noisy_max``); OpenDP's map of the chain is its epsilon.

    The utilities are clipped to [-1, 0] here, so any two inputs give vectors at most 1
    apart in L-inf (not monotone): stability min(d_in, 1).
    """
    domain = dp.vector_domain(dp.atom_domain(T=float, nan=False), size=n_candidates)
    with user_defined():
        to_utilities = dp.t.make_user_transformation(
            user_domain(SELPE_DOMAIN), dp.symmetric_distance(), domain, utility_metric(),
            function=lambda priv: [float(u) for u in
                                   np.clip(np.asarray(utilities(priv), dtype=np.float64),
                                           -1.0, 0.0)],
            stability_map=lambda d_in: float(min(d_in, 1)))
    return to_utilities >> dp.m.then_noisy_max(dp.max_divergence(), scale=scale)


def make_parallel_batches(parts: dict[Any, dp.Measurement],
                          combine: Callable[[dict[Any, Any]], Any]) -> dp.Measurement:
    """Parallel composition of ``parts`` over disjoint privacy units, on SelPE's input.

    OpenDP 0.16 offers no parallel-composition combinator for a user domain (its
    compositors are sequential), so this one step is a user measurement; its map is built
    from OpenDP's maps of the parts: d_in units sit in at most min(d_in, parts) parts, each
    charged at most its own map at d_in. Contract: every unit reaches exactly one part
    (SelPE: one class by `make_one_class_per_unit`, one batch by the keyed hash of its id).
    ``combine`` post-processes the parts' outputs inside the measurement.
    """
    n = len(parts)

    def privacy_map(d_in: int) -> float:
        if d_in == 0 or n == 0:
            return 0.0
        return min(d_in, n) * max(float(m.map(d_in)) for m in parts.values())

    with user_defined():
        return dp.m.make_user_measurement(
            user_domain(SELPE_DOMAIN), dp.symmetric_distance(), dp.max_divergence(),
            function=lambda priv: combine({k: m(priv) for k, m in parts.items()}),
            privacy_map=privacy_map, TO="ExtrinsicObject")
