"""Zero-concentrated DP: the adaptive compositor of the Gaussian selection rounds and
OpenDP's rho-zCDP -> (epsilon, delta) conversion, which the selection's Gaussian modes and
the counts' model modes are budgeted and accounted by."""

from __future__ import annotations

import functools

from release.dp import prelude as dp
from release.dp.user import PRIVATE_DOMAIN, user_domain

CONVERSION_CONSTRUCTOR = ("opendp.combinators.make_adaptive_composition (zCDP) >> "
                          "make_zCDP_to_approxDP >> make_fix_delta")


def make_zcdp_compositor(rhos: list[float]) -> dp.Measurement:
    """Adaptive composition of the rounds in zero-concentrated DP (rho adds up)."""
    return dp.c.make_adaptive_composition(user_domain(PRIVATE_DOMAIN), dp.symmetric_distance(),
                                          dp.zero_concentrated_divergence(), d_in=1,
                                          d_mids=list(rhos))


def make_approx_dp(measurement: dp.Measurement, delta: float) -> dp.Measurement:
    """OpenDP's rho-zCDP -> (epsilon, delta) conversion at a fixed delta."""
    return dp.c.make_fix_delta(dp.c.make_zCDP_to_approxDP(measurement), delta)


def approx_dp_of_rho(rho: float, delta: float) -> tuple[float, float]:
    """(epsilon, delta) of a total rho-zCDP, from OpenDP's conversion."""
    return approx_dp_of([rho], delta)


def approx_dp_of(rhos: list[float], delta: float) -> tuple[float, float]:
    """(epsilon, delta) of the composed rounds, from OpenDP's maps."""
    return _approx_dp_of(tuple(rhos), delta)


@functools.lru_cache(maxsize=4096)
def _approx_dp_of(rhos: tuple[float, ...], delta: float) -> tuple[float, float]:
    """OpenDP's answer for public numbers only, kept: a calibration asks ~60 of them, and
    every release of the same budget asks the same ones (0.7 s a release otherwise)."""
    eps, d = make_approx_dp(make_zcdp_compositor(list(rhos)), delta).map(1)
    return float(eps), float(d)


def calibrate_zcdp_budget(epsilon: float, delta: float, shares: list[float]) -> list[float]:
    """Per-round rho (shares of a total) for the largest total whose OpenDP conversion to
    (epsilon, delta) stays within ``epsilon``."""
    def fits(total: float) -> bool:
        return approx_dp_of([total * s for s in shares], delta)[0] <= epsilon

    # zCDP -> (epsilon, delta) gives epsilon >= rho, so the total lies below epsilon
    total = float(dp.binary_search(fits, bounds=(epsilon * 1e-12, epsilon)))
    if not fits(total):
        raise RuntimeError("no zCDP budget meets the selection epsilon")
    return [total * s for s in shares]
