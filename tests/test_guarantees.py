"""The derived guarantees: known values, monotonicity, and huge epsilons."""

from __future__ import annotations

import math

from selpe_audit.artifact.guarantees import (
    advantage_bound,
    derived_guarantees,
    reconstruction_bound,
    tpr_bound,
)


def test_known_values():
    assert math.isclose(advantage_bound(2.0), math.tanh(1.0))
    assert math.isclose(tpr_bound(1.0, 0.0, 0.01), math.e * 0.01)
    assert math.isclose(reconstruction_bound(1.0, 0.0, 1e-4), math.e * 1e-4)
    # the second branch of the region binds for large fpr
    assert math.isclose(tpr_bound(1.0, 0.0, 0.9), 1 - 0.1 / math.e)


def test_monotone_and_capped():
    prev = 0.0
    for eps in (0.1, 0.5, 1, 2, 4, 8, 1e6, math.inf):
        t = tpr_bound(eps, 0.0, 0.01)
        assert prev <= t <= 1.0
        prev = t
    g = derived_guarantees(1e6, 0.0)
    assert g.membership_tpr_max[0].tpr_max == 1.0
    assert all(isinstance(s, str) for s in g.statements)
