"""SecPE's noisy cluster representatives as one selection round (``--selection representatives``).

SecPE (secret-protected evolution): instead of every private row voting, a few noisy
representatives vote. Per class:

1. Public skeleton (no privacy cost): k-means anchors over the candidates' features, and a
   d-dimensional basis (PCA of the candidates) in which the representatives move. Both
   come from the candidate pool only.
2. Private statistics: each private row is assigned to its nearest anchor; its offset from
   the anchor, projected on the basis, is clipped to norm R. Per anchor: the weighted count
   and the weighted sum of clipped offsets (weights from `release.selection.gaussian`, so a
   privacy unit moves the count block by <= 1 and the sum block by <= R in L2: sensitivity
   sqrt(1 + R^2) for the joint vector). OpenDP's Gaussian noises all classes in one go.
3. Post-processing, inside the measurement: noisy center = anchor + basis @ (noisy sum /
   max(noisy count, 1)); each representative votes for its nearest candidate (kernel
   distance g) with its noisy count (negative counts vote 0); the most-voted survive.

No private embedding, center or exact count leaves the measurement: only the winners do.

Features live in a flat vector space: each semantic channel's unit vector times sqrt(w),
each numeric channel's value / scale times sqrt(w) (scales fitted on the candidates), so
squared Euclidean distances weigh channels as the kernel does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
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
from selpe_audit.artifact.modes import REPRESENTATIVES, ModeDescriptor, RepresentativesBlock
from selpe_audit.kernel.distance import Features, Kernel, NumericScale

_NORM_FLOOR = 1e-12
_CHUNK = 2048  # private rows per block
_KMEANS_DIMS = 32  # principal components k-means runs on


def sensitivity(radius: float) -> float:
    """L2 sensitivity of one class block [counts, offset sums] (see the module docstring)."""
    return math.sqrt(1.0 + radius ** 2)


def flatten(kernel: Kernel, feats: Features, scale: NumericScale) -> np.ndarray:
    """(n, D) flat vectors of ``feats`` (private if they are)."""
    parts = [np.sqrt(kernel.weights[ch]) * feats.semantic[ch].astype(np.float64)
             for ch in kernel.semantic_channels]
    parts += [(np.sqrt(kernel.weights[ch]) * feats.numeric[ch] / scale.scales[ch])[:, None]
              for ch in kernel.numeric_channels]
    return np.hstack(parts) if parts else np.zeros((feats.n, 0))


def unflatten(kernel: Kernel, flat: np.ndarray, cand: Features,
              scale: NumericScale) -> Features:
    """Features of flat vectors: semantic parts renormalised to unit length (as batch centers
    are), numeric parts scaled back."""
    semantic, numeric, col = {}, {}, 0
    for ch in kernel.semantic_channels:
        d = cand.semantic[ch].shape[1]
        x = flat[:, col:col + d] / np.sqrt(kernel.weights[ch])
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        semantic[ch] = np.divide(x, norms, out=np.zeros_like(x), where=norms > _NORM_FLOOR)
        col += d
    for ch in kernel.numeric_channels:
        numeric[ch] = flat[:, col] / np.sqrt(kernel.weights[ch]) * scale.scales[ch]
        col += 1
    return Features(n=flat.shape[0], semantic=semantic, numeric=numeric)


@dataclass(frozen=True)
class Skeleton:
    """Public: k-means anchors (A, D) and an orthonormal basis (D, d) of the candidates."""

    anchors: np.ndarray
    basis: np.ndarray

    @property
    def size(self) -> int:
        """Length of this class's block: A counts and A x d offset sums."""
        return self.anchors.shape[0] * (1 + self.basis.shape[1])


def skeleton(cand_flat: np.ndarray, n_anchors: int, dims: int, seed: int) -> Skeleton:
    """Anchors and basis from the candidates only (public; the seed is not DP noise).

    k-means runs on the candidates' top principal components (at most `_KMEANS_DIMS`, which
    keeps it fast at M = 10,000 in thousands of dimensions); each anchor is the full-space
    mean of its cluster. The basis is the top ``dims`` of the same components.
    scikit-learn is imported here: at module level every command's start paid for it."""
    from sklearn.cluster import KMeans
    from sklearn.utils.extmath import randomized_svd

    centered = cand_flat - cand_flat.mean(axis=0)
    k = min(max(dims, _KMEANS_DIMS), *centered.shape)
    if k > 0:
        _, sv, vt = randomized_svd(centered, n_components=k, n_iter=2, random_state=seed)
        vt = vt[:int(np.sum(sv > 1e-9 * max(1.0, float(sv[0]))))]  # identical: rank 0
    else:
        vt = np.zeros((0, cand_flat.shape[1]))
    basis = vt[:dims].T
    a = max(1, min(n_anchors, len(np.unique(cand_flat, axis=0))))
    if a == 1 or vt.shape[0] == 0:
        return Skeleton(anchors=cand_flat.mean(axis=0, keepdims=True), basis=basis)
    labels = KMeans(n_clusters=a, n_init=3, random_state=seed).fit_predict(centered @ vt.T)
    anchors = np.stack([cand_flat[labels == j].mean(axis=0) for j in range(a)
                        if np.any(labels == j)])
    return Skeleton(anchors=anchors, basis=basis)


def _assign(x: np.ndarray, anchors: np.ndarray) -> np.ndarray:
    d2 = (np.einsum("ij,ij->i", x, x)[:, None] - 2 * x @ anchors.T
          + np.einsum("ij,ij->i", anchors, anchors)[None, :])
    return d2.argmin(axis=1)


def class_stats(kernel: Kernel, feats: Features, scale: NumericScale, weights: np.ndarray,
                sk: Skeleton, radius: float) -> np.ndarray:
    """[weighted counts per anchor, weighted clipped offset sums per anchor] (private),
    in chunks of rows so memory stays bounded at any n."""
    a, d = sk.anchors.shape[0], sk.basis.shape[1]
    counts, sums = np.zeros(a), np.zeros((a, d))
    for lo in range(0, feats.n, _CHUNK):
        idx = np.arange(lo, min(lo + _CHUNK, feats.n))
        x = flatten(kernel, feats.take(idx), scale)
        assign = _assign(x, sk.anchors)
        off = (x - sk.anchors[assign]) @ sk.basis
        norms = np.linalg.norm(off, axis=1, keepdims=True)
        off *= np.minimum(1.0, radius / np.maximum(norms, _NORM_FLOOR))
        counts += np.bincount(assign, weights=weights[idx], minlength=a)
        np.add.at(sums, assign, off * weights[idx, None])
    return np.concatenate([counts, sums.ravel()])


def stats_vector(priv: PrivateClasses, kernel: Kernel, pools: Pools,
                 skeletons: dict[Any, Skeleton], radius: float) -> np.ndarray:
    """Every class's block, concatenated in pool order (private; zeros for a class with no
    rows, so the layout depends on public inputs only)."""
    weights = row_weights(priv)
    blocks = []
    for c, (_, scale) in pools.items():
        sk, priv_feats = skeletons[c], priv.priv_features.get(c)
        if priv_feats is None or priv_feats.n == 0:
            blocks.append(np.zeros(sk.size))
        else:
            blocks.append(class_stats(kernel, priv_feats, scale, weights[c], sk, radius))
    return np.concatenate(blocks)


def rankings(noisy: Any, kernel: Kernel, pools: Pools,
             skeletons: dict[Any, Skeleton]) -> dict[Any, list[int]]:
    """Post-processing: noisy representatives vote with their noisy counts."""
    v = np.asarray(noisy, dtype=np.float64)
    sizes = [skeletons[c].size for c in pools]
    out: dict[Any, list[int]] = {}
    for c, start in zip(pools, block_offsets(sizes), strict=True):
        cand, scale = pools[c]
        sk = skeletons[c]
        a, d = sk.anchors.shape[0], sk.basis.shape[1]
        counts = v[start:start + a]
        sums = v[start + a:start + a * (1 + d)].reshape(a, d)
        centers = sk.anchors + (sums / np.maximum(counts, 1.0)[:, None]) @ sk.basis.T
        reps = unflatten(kernel, centers, cand, scale)
        near = kernel.pairwise(reps, cand, scale).argmin(axis=1)
        if not np.any(counts > 0):  # every count is noise below zero: the top anchor's pick
            out[c] = [int(near[int(np.argmax(counts))])]
            continue
        votes = np.zeros(cand.n)
        np.add.at(votes, near, np.maximum(counts, 0.0))
        out[c] = rank_votes(votes, 0.0)
    return out


class RepresentativesMode(GaussianVotesMode):
    descriptor: ModeDescriptor = REPRESENTATIVES

    def statistics(self, cfg: SelectionConfig, kernel: Kernel, pools: Pools,
                   t: int) -> GaussianStatistics:
        own = cfg.settings
        skeletons = {c: skeleton(flatten(kernel, f, s), own.n_anchors(cfg.quota(t)), own.dims,
                                 seed=t)
                     for c, (f, s) in pools.items()}  # public: candidates only
        return GaussianStatistics(
            sensitivity(cfg.settings.radius),
            lambda p: stats_vector(p, kernel, pools, skeletons, own.radius),
            lambda noisy, _scale: rankings(noisy, kernel, pools, skeletons))

    def artifact_block(self, cfg: SelectionConfig) -> RepresentativesBlock:
        own = cfg.settings
        return RepresentativesBlock(
            own.anchors or "the round's quota", own.radius, own.dims,
            "k-means anchors and a PCA basis of the round's candidates (public)",
            "noisy center = anchor + basis (noisy offset sum / max(noisy count, 1)); each "
            "votes for its nearest candidate with its noisy count")


MODE = register(RepresentativesMode())
