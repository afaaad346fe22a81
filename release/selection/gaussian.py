"""What the Gaussian (zCDP) modes share: pe-histogram and representatives.

- Row weights that bound a privacy unit's influence: every row of a unit weighs
  1 / (the unit's rows, over all classes), so a unit's weights sum to 1 however many rows
  it has (row unit: weight 1). A unit then moves a vote histogram by at most 1 in L1,
  hence 1 in L2, whatever its rows and classes: the sensitivity needs no per-class bound.
- The layout of every class's statistics in one vector, so one OpenDP Gaussian per round
  covers all classes (a unit's contributions are counted once, across its classes).
- The round itself: the mode's statistics, OpenDP's Gaussian at the scale its map needs
  for rho_t, the ranking of candidates by noisy votes inside the measurement; and the
  rounds' ledger entries (their epsilon is in the accounting's conversion entry).

Private in, private out, except `rank_votes`, which reads noisy (DP) numbers only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from release.config_sections import SelectionConfig
from release.dp.gaussian import GAUSSIAN_CONSTRUCTOR, calibrate_gaussian_scale, make_gaussian_round
from release.selection.types import Pools, PrivateClasses, RoundOutput, SelectionRun
from selpe_audit.artifact.modes import ModeDescriptor
from selpe_audit.artifact.records import LedgerEntry
from selpe_audit.kernel.distance import Kernel
from selpe_audit.schema import Schema

if TYPE_CHECKING:  # a type only: OpenDP is called from release.dp
    from release.dp import Measurement


def row_weights(priv: PrivateClasses) -> dict[Any, np.ndarray]:
    """Per class, the weight of each private row: 1 / (rows of its unit, over all classes)."""
    rows = Counter(u for ids in priv.priv_unit_ids.values() for u in ids)
    return {c: np.array([1.0 / rows[u] for u in ids], dtype=np.float64)
            for c, ids in priv.priv_unit_ids.items()}


def block_offsets(sizes: list[int]) -> list[int]:
    """Start of each class's block in the round's vector (sizes are public)."""
    return [0, *np.cumsum(sizes).tolist()][:-1]


def rank_votes(votes: np.ndarray, floor: float) -> list[int]:
    """Candidates with noisy votes above ``floor``, most votes first; if none passes, the
    single highest (so every class keeps a winner; post-processing, so still DP)."""
    order = np.argsort(-votes, kind="stable")
    passed = [int(i) for i in order if votes[i] > floor]
    return passed or [int(order[0])]


@dataclass(frozen=True)
class GaussianStatistics:
    """A Gaussian round before its noise: the private vector (``vectorize``, in which one
    privacy unit moves at most ``sensitivity`` in L2) and the post-processing of its noisy
    version into per-class rankings (``rank(noisy, scale)``)."""

    sensitivity: float
    vectorize: Callable[[PrivateClasses], np.ndarray]
    rank: Callable[[Any, float], dict[Any, list[int]]]


class GaussianVotesMode:
    """A zCDP mode whose round is OpenDP's Gaussian on `statistics` (also what the mechanism
    audit runs). Subclasses set ``descriptor`` and write `statistics` and `artifact_block`."""

    descriptor: ModeDescriptor
    constructor = GAUSSIAN_CONSTRUCTOR

    def statistics(self, cfg: SelectionConfig, kernel: Kernel, pools: Pools,
                   t: int) -> GaussianStatistics:
        raise NotImplementedError

    def artifact_block(self, cfg: SelectionConfig) -> Any | None:
        raise NotImplementedError

    def private_rows(self, priv_rows: pl.DataFrame, schema: Schema,
                     person_field: str | None) -> pl.DataFrame:
        return priv_rows  # a person's rows are weighted, not cut

    def round(self, cfg: SelectionConfig, kernel: Kernel, pools: Pools, t: int,
              budget: float) -> tuple[Measurement, RoundOutput]:
        g = self.statistics(cfg, kernel, pools, t)
        scale = calibrate_gaussian_scale(g.sensitivity, budget)
        measurement = make_gaussian_round(g.sensitivity, scale, g.vectorize,
                                          lambda noisy: g.rank(noisy, scale))
        if measurement.map(1) > budget:  # OpenDP's map, not ours, decides
            raise RuntimeError("the Gaussian round exceeds its rho")
        # rho: the round's slot in the compositor (what it is charged); mu: the Gaussian's own
        return measurement, RoundOutput(t, None, scale, cfg.quota(t), rho=budget,
                                        mu=g.sensitivity / scale, sensitivity=g.sensitivity)

    def ledger_entries(self, cfg: SelectionConfig, run: SelectionRun) -> list[LedgerEntry]:
        return [LedgerEntry(
            f"selection/round/{r.round}", self.descriptor.mechanism, self.constructor,
            r.scale, 0.0, 0.0,
            f"round {r.round}: every class in one Gaussian (L2 sensitivity "
            f"{r.sensitivity:.4g} per privacy unit)",
            "sequential across rounds in zCDP (OpenDP adaptive composition); its epsilon and "
            "delta are in selection/zcdp-to-approx-dp", "rho-zCDP", rho=r.rho, mu=r.mu)
            for r in run.rounds]
