"""Private Evolution's noisy vote histogram as one selection round (``--selection pe-histogram``).

Lin et al. (2024) and Aug-PE (Xie et al. 2024): every private row votes for its nearest
candidate; Gaussian noise on the histogram; candidates whose noisy votes fall below a
threshold are dropped; the most-voted survive. Here "nearest" is the release's kernel
distance g, a row votes with its weight from `release.selection.gaussian.row_weights` (so a
privacy unit moves the histogram by at most 1 in L2: sensitivity 1), the noise is OpenDP's
(`release.selection.gaussian`), and the threshold is ``threshold`` noise
scales. Every private row costs M kernel distances: the cost SecPE's representatives avoid.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from release.config_sections import SelectionConfig
from release.selection.gaussian import (
    GaussianStatistics,
    GaussianVotesMode,
    block_offsets,
    rank_votes,
    row_weights,
)
from release.selection.registry import register
from release.selection.types import Pools, PrivateClasses
from selpe_audit.artifact.modes import PE_HISTOGRAM, ModeDescriptor, PeHistogramBlock
from selpe_audit.kernel.distance import Features, Kernel, NumericScale

SENSITIVITY = 1.0  # L2: a unit's row weights sum to 1 and each row votes once
_CHUNK = 1024  # private rows per distance block (bounds memory at M candidates)


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
        priv_feats = priv.priv_features.get(c)
        if priv_feats is None or priv_feats.n == 0:
            continue
        np.add.at(votes, start + nearest(kernel, priv_feats, cand, scale), weights[c])
    return votes


def rankings(noisy: Any, pools: Pools, floor: float) -> dict[Any, list[int]]:
    """Post-processing: per class, candidates above the threshold, most noisy votes first."""
    v = np.asarray(noisy, dtype=np.float64)
    sizes = [f.n for f, _ in pools.values()]
    return {c: rank_votes(v[s:s + n], floor)
            for c, s, n in zip(pools, block_offsets(sizes), sizes, strict=True)}


class PeHistogramMode(GaussianVotesMode):
    descriptor: ModeDescriptor = PE_HISTOGRAM

    def statistics(self, cfg: SelectionConfig, kernel: Kernel, pools: Pools,
                   t: int) -> GaussianStatistics:
        return GaussianStatistics(
            SENSITIVITY, lambda p: vote_vector(p, kernel, pools),
            lambda noisy, scale: rankings(noisy, pools, cfg.settings.threshold * scale))

    def artifact_block(self, cfg: SelectionConfig) -> PeHistogramBlock:
        return PeHistogramBlock(
            cfg.settings.threshold,
            "each private row votes for its nearest candidate (kernel distance) with weight "
            "1 / (its privacy unit's rows): L2 sensitivity 1",
            "candidates with noisy votes above threshold x scale, most votes first, up to the "
            "quota (at least the top one)")


MODE = register(PeHistogramMode())
