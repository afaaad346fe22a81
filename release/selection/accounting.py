"""How rounds add up, per accounting kind: pure epsilon-DP or rho-zCDP.

Pure: round epsilons are shares of the selection's epsilon and OpenDP's adaptive compositor
(max divergence) adds them. zCDP: the largest total rho whose OpenDP conversion to
(epsilon, delta) fits the selection's epsilon is split over the rounds, composed by OpenDP
in zCDP and converted at the configured delta (one ledger entry of its own, no noise).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from release.config_sections import SelectionConfig
from release.dp.noisy_max import make_pure_compositor
from release.dp.zcdp import (
    CONVERSION_CONSTRUCTOR,
    approx_dp_of,
    calibrate_zcdp_budget,
    make_zcdp_compositor,
)
from release.selection.types import RoundOutput, SelectionRun
from selpe_audit.artifact.modes import ModeDescriptor
from selpe_audit.artifact.records import LedgerEntry, SelectionAccounting

if TYPE_CHECKING:  # a type only: OpenDP is called from release.dp
    from release.dp import Measurement

PURE_MEASURE = "pure epsilon-DP (max divergence)"
ZCDP_MEASURE = "rho-zCDP (Gaussian, mu-GDP), converted to (epsilon, delta)"


def round_budgets(d: ModeDescriptor, cfg: SelectionConfig, epsilon: float,
                  delta: float) -> list[float]:
    """Each round's slot: epsilon_t (pure) or rho_t (zCDP)."""
    if not d.needs_delta:
        return cfg.round_epsilons(epsilon)
    if not 0 < delta < 1:
        raise ValueError(f"selection mode {d.name} needs 0 < delta < 1")
    return calibrate_zcdp_budget(epsilon, delta, cfg.shares())


def compositor(d: ModeDescriptor, budgets: list[float]) -> Measurement:
    """OpenDP's adaptive compositor over the rounds: later candidates see earlier winners."""
    return make_zcdp_compositor(budgets) if d.needs_delta else make_pure_compositor(budgets)


def total(d: ModeDescriptor, constructor: str, composed: Measurement,
          budgets: list[float], rounds: list[RoundOutput], delta: float) -> SelectionAccounting:
    """The selection's total from OpenDP's maps."""
    if not d.needs_delta:
        return SelectionAccounting(d.name, PURE_MEASURE, float(composed.map(1)), 0.0,
                          constructor=constructor)
    eps, dlt = approx_dp_of(budgets, delta)
    mu = math.sqrt(sum(r.mu ** 2 for r in rounds if r.mu is not None))
    return SelectionAccounting(d.name, ZCDP_MEASURE, eps, dlt, rho=float(composed.map(1)), mu=mu,
                      constructor=f"{constructor}; {CONVERSION_CONSTRUCTOR}")


def closing_entries(run: SelectionRun) -> list[LedgerEntry]:
    """After the rounds' entries: the zCDP -> (epsilon, delta) conversion, if any."""
    acc = run.accounting
    if acc.rho is None:
        return []
    return [LedgerEntry(
        "selection/zcdp-to-approx-dp", "conversion of the rounds' total rho-zCDP to "
        "(epsilon, delta) (no noise of its own)", CONVERSION_CONSTRUCTOR, 0.0, acc.epsilon,
        acc.delta, f"all {len(run.rounds)} selection rounds: rho {acc.rho:.6g}, mu "
        f"{acc.mu:.6g}", "sequential with the counts (epsilons add)",
        "(epsilon, delta)-DP from rho-zCDP", rho=acc.rho, mu=acc.mu)]
