"""Private Evolution's noisy vote histogram as one selection round (``--selection pe-histogram``).

Lin et al. (2024) and Aug-PE (Xie et al. 2024): every private row votes for its nearest
candidate; Gaussian noise on the histogram; candidates whose noisy votes fall below a
threshold are dropped; the most-voted survive. Here "nearest" is the release's kernel
distance g, a row votes with its weight from `release.gaussian_votes.row_weights` (so a
privacy unit moves the histogram by at most 1 in L2: sensitivity 1), the noise is OpenDP's
(`release.opendp_mechanisms.gaussian_round`), and the threshold is ``threshold`` noise
scales. Every private row costs M kernel distances: the cost SecPE's representatives avoid.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from release.gaussian_votes import block_offsets, rank_votes, row_weights
from selpe_audit.kernel.distance import Features, Kernel, NumericScale

if TYPE_CHECKING:
    from release.selection import PrivateClasses

SENSITIVITY = 1.0  # L2: a unit's row weights sum to 1 and each row votes once
MECHANISM = "Gaussian noise on the vote histogram (pe-histogram)"
_CHUNK = 1024  # private rows per distance block (bounds memory at M candidates)

Pools = dict[Any, tuple[Features, NumericScale]]


def nearest(kernel: Kernel, priv_features: Features, cand_features: Features,
            scale: NumericScale) -> np.ndarray:
    """Index of each private row's nearest candidate (private)."""
    out = np.empty(priv_features.n, dtype=np.int64)
    for lo in range(0, priv_features.n, _CHUNK):
        idx = np.arange(lo, min(lo + _CHUNK, priv_features.n))
        out[idx] = kernel.pairwise(priv_features.take(idx), cand_features, scale).argmin(axis=1)
    return out


def vote_vector(priv: PrivateClasses, kernel: Kernel, pools: Pools) -> np.ndarray:
    """Every class's weighted vote histogram, concatenated in pool order (private)."""
    sizes = [f.n for f, _ in pools.values()]
    votes = np.zeros(sum(sizes))
    weights = row_weights(priv)
    for start, (c, (cand, scale)) in zip(block_offsets(sizes), pools.items(), strict=True):
        feats = priv.priv_features.get(c)
        if feats is None or feats.n == 0:
            continue
        np.add.at(votes, start + nearest(kernel, feats, cand, scale), weights[c])
    return votes


def rankings(noisy: Any, pools: Pools, floor: float) -> dict[Any, list[int]]:
    """Post-processing: per class, candidates above the threshold, most noisy votes first."""
    v = np.asarray(noisy, dtype=np.float64)
    sizes = [f.n for f, _ in pools.values()]
    return {c: rank_votes(v[s:s + n], floor)
            for c, s, n in zip(pools, block_offsets(sizes), sizes, strict=True)}
