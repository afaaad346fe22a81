"""How many synthetic rows go where - post-processing of released counts only.

Used twice: N rows over the classes (class balance), and, inside a class, its row target
over the released cells of that class (categories, bins, cohorts) as targets for the fit.

The release publishes *signed* noisy counts (unbiased, possibly negative). Decode turns them
into integer row targets that sum exactly to the requested N:

1. clamp every noisy count at 0 (a negative count means "about zero");
2. renormalise the clamped counts to shares; if every count clamps to 0 there is no signal
   left, so fall back to equal shares (uniform) rather than refusing;
3. round N x share by the largest-remainder (Hamilton) method: everyone gets the floor of
   their quota, the rows left over go to the largest fractional parts, ties to the lower
   index. So each target is within 1 of its quota and a larger count never gets fewer rows.

Nothing here reads private data: the inputs are released numbers and N. Steps 1 and 2 are
`shares`, shared with every sampler of released counts (`selpe_audit.artifact.sampling`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from selpe_audit.artifact.sampling import shares

__all__ = ["allocate", "largest_remainder", "shares"]


def largest_remainder(weights: np.ndarray, n: int) -> np.ndarray:
    """Integers >= 0 summing to ``n``, each within 1 of ``n * weights`` (weights sum to 1)."""
    if n < 0:
        raise ValueError("n must be >= 0")
    quota = n * np.asarray(weights, dtype=np.float64)
    base = np.floor(quota).astype(np.int64)
    left = n - int(base.sum())
    if left > 0:
        # Stable sort on the negated remainder: largest first, ties to the lower index.
        order = np.argsort(-(quota - base), kind="stable")
        base[order[:left]] += 1
    return base


def allocate(dp_counts: Sequence[float] | np.ndarray, n: int) -> np.ndarray:
    """Row targets for each count: clamp at 0, renormalise, largest-remainder round to ``n``.

    >>> allocate([10, -3, 30], 8).tolist()
    [2, 0, 6]
    >>> allocate([-1, -5], 3).tolist()
    [2, 1]
    """
    return largest_remainder(shares(dp_counts), n)

