"""What the two Gaussian selection modes (pe-histogram, representatives) share.

- Row weights that bound a privacy unit's influence: every row of a unit weighs
  1 / (the unit's rows, over all classes), so a unit's weights sum to 1 however many rows
  it has (row unit: weight 1). A unit then moves a vote histogram by at most 1 in L1,
  hence 1 in L2, whatever its rows and classes: the sensitivity needs no per-class bound.
- The layout of every class's statistics in one vector, so one OpenDP Gaussian per round
  covers all classes (a unit's contributions are counted once, across its classes).
- The ranking of candidates by noisy votes (post-processing).

Private in, private out, except `rank_votes`, which reads noisy (DP) numbers only.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from release.selection import PrivateClasses


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
