"""SelectTop (SelPE's decode step): rank a class's candidates by closeness to its winners.

The kernel is the release's own (channels, weights and numeric-scale rule from the
artifact's selection block) with the local copy of the embedder. The center is one batch
over every winner of the class across all rounds (`Kernel.centers` with b = 1); numeric
scales come from the candidates being ranked, as in the release. Everything is public:
winners are DP outputs and candidates are synthetic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from decode.released import Released
from selpe_audit.kernel.distance import Kernel, KernelConfig

if TYPE_CHECKING:
    from selpe_audit.models import Models


def artifact_kernel(released: Released,
                    models: Models) -> tuple[Kernel, dict[str, Any] | None]:
    """The release's kernel, and what provenance records about the local embedder.

    A local embedder whose weights differ from the artifact's still ranks candidates, just
    not by the release's exact distances; provenance says whether they match. The embedder
    comes from ``models`` (loaded there on first use), and only when a channel needs it.
    """
    block = released.kernel
    assert block is not None, "SelectTop needs an artifact with a selection block"
    scale = block.get("numeric_scale", {})
    config = KernelConfig(weights=block["weights"],
                          scale_iqr_multiple=scale.get("multiple", 2.0),
                          scale_floor=scale.get("floor_fraction_of_public_range", 0.05))
    numeric_only = Kernel(released.schema, None, config)
    if not numeric_only.semantic_channels:
        return numeric_only, None
    embedder = models.embedder()
    kernel = Kernel(released.schema, embedder, config)
    info = embedder.info.to_json()
    expected = (block.get("embedder") or {}).get("weights_sha256")
    return kernel, {**info, "matches_artifact": info["weights_sha256"] == expected}


def winner_distances(kernel: Kernel, winners: list[dict[str, Any]],
                     candidates: list[dict[str, Any]]) -> np.ndarray:
    """g(center of all winners, candidate) for every candidate, in [0, 1]."""
    cand = kernel.featurize(candidates)
    win = kernel.featurize(winners)
    center = kernel.centers(win, np.zeros(win.n, dtype=np.intp), 1)
    return kernel.distances(center, cand, kernel.fit_scale(cand))[0]


def closest(distances: np.ndarray, keep: int) -> np.ndarray:
    """Indices of the ``keep`` smallest distances (ties: earlier candidate), in index order."""
    return np.sort(np.argsort(distances, kind="stable")[:keep])
