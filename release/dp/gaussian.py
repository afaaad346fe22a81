"""The Gaussian selection modes' rounds (pe-histogram, representatives) in zCDP."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from release.dp import prelude as dp
from release.dp.calibration import calibrate
from release.dp.user import PRIVATE_DOMAIN, user_defined, user_domain

GAUSSIAN_CONSTRUCTOR = ("opendp.transformations.make_user_transformation (stability d_in * "
                        "sensitivity, L2) >> opendp.measurements.make_gaussian "
                        "(ZeroConcentratedDivergence)")


def _vector_space() -> tuple[dp.Domain, dp.Metric]:
    return dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.l2_distance(T=float)


def make_gaussian(scale: float) -> dp.Measurement:
    """OpenDP's Gaussian (zCDP) on a float vector in L2."""
    return dp.m.make_gaussian(*_vector_space(), scale=scale)


def calibrate_gaussian_scale(sensitivity: float, rho: float) -> float:
    """The Gaussian scale whose OpenDP map at L2 distance ``sensitivity`` is <= rho."""
    return calibrate(make_gaussian, sensitivity, rho)[1]


def make_gaussian_round(sensitivity: float, scale: float, vectorize: Callable[[Any], Any],
                        postprocess: Callable[[Any], Any]) -> dp.Measurement:
    """One Gaussian round as an OpenDP chain on the private input.

    ``vectorize`` maps the private input to one float vector in which one privacy unit
    moves at most ``sensitivity`` in L2 (the caller bounds it by clipping and weights; the
    stability map states it). OpenDP's Gaussian adds the noise; ``postprocess`` turns the
    noisy vector into winners inside the measurement, so nothing else leaves it.
    """
    vdomain, vmetric = _vector_space()
    with user_defined():
        stats = dp.t.make_user_transformation(
            user_domain(PRIVATE_DOMAIN), dp.symmetric_distance(), vdomain, vmetric,
            function=lambda priv: [float(x) for x in vectorize(priv)],
            stability_map=lambda d_in: float(d_in) * sensitivity)
        post = dp.new_function(lambda noisy: postprocess(noisy), TO="ExtrinsicObject")
    return stats >> make_gaussian(scale) >> post
