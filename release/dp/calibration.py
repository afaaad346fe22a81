"""The one place a noise scale is found: from OpenDP's own privacy map.

OpenDP's ``binary_search_param`` builds a measurement per step (about 60; each build of the
Fixed marginals chain takes half a second, so 30 s for the demo's counts). Every mechanism
the release calibrates has a map that scales as a power of 1 / scale: epsilon = e(1) / scale
for Laplace and the noisy max (pure DP), rho = r(1) / scale^2 for the Gaussian (zCDP). So
one probe at scale 1 gives the scale, and OpenDP's map of the result must fit the budget.
Should a map ever not have that form (an OpenDP change), the bracket the probe gives is
searched by ``binary_search_param`` itself; the result is checked by the map either way.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

from release.dp import prelude as dp

M = TypeVar("M", dp.Measurement, Any)

#: the probe's scale is raised by a relative hair, so the map's float rounding stays inside
#: the budget: per power of the map (the Gaussian's square root rounds more)
HAIR = {1: 1e-12, 2: 1e-9}


def calibrate(make: Callable[[float], M], d_in: Any, d_out: float) -> tuple[M, float]:
    """``make(scale)`` at the smallest scale (up to a hair) whose OpenDP map at ``d_in`` is
    at most ``d_out``, and that scale."""
    probe = make(1.0)
    power = 2 if probe.output_measure == dp.zero_concentrated_divergence() else 1
    scale = (float(probe.map(d_in)) / d_out) ** (1 / power) * (1 + HAIR[power])
    if not math.isfinite(scale) or scale <= 0:
        raise RuntimeError(f"OpenDP's map gives no noise scale for a budget of {d_out:g}")
    measurement = make(scale)
    if float(measurement.map(d_in)) > d_out:  # not a power law: OpenDP's search in the bracket
        scale = float(dp.binary_search_param(make, d_in, d_out, bounds=(scale, 2 * scale)))
        measurement = make(scale)
    if float(measurement.map(d_in)) > d_out:
        raise RuntimeError("OpenDP calibration exceeded its budget")
    return measurement, scale
