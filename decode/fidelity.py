"""Distance of decoded records to the released counts (public: no private data involved).

For a field with a class-conditional histogram, the released joint distribution over
(class, category or bin) is p(c, k) = share(c) * share(k | c), both from clamped,
renormalised noisy counts (`decode.allocation.shares`); the records give the empirical
q(c, k). The total variation distance is 1/2 sum |q - p|. The same for cohorts x class. It
says how well the output matches what was released, not how close it is to the private
data (that is the audits' job, inside the enclave).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from decode.allocation import shares
from decode.released import Released


def cell_counts(released: Released, records: list[dict[str, Any]]) -> dict[str, list[list[int]]]:
    """The records' (class x cell) counts per histogram field (and ``"cohorts"``): what
    `tvd_from_counts` compares, summable over chunks."""
    at = {c: k for k, c in enumerate(released.classes)}
    classes = np.array([at[r[released.schema.label]] for r in records], dtype=np.intp)

    def table(cells: np.ndarray, width: int) -> list[list[int]]:
        flat = np.bincount(classes * width + cells, minlength=len(at) * width)
        return flat.reshape(len(at), width).tolist()

    out = {name: table(released.cells(name, [r[name] for r in records]), len(h.keys))
           for name, h in released.histograms.items()}
    if released.cohorts:
        out["cohorts"] = table(np.array([released.view.counts.cohort_of(r) for r in records],
                                        dtype=np.intp), len(released.cohorts))
    return out


def _tvd(released: Released, counts: list[list[int]], dp_by_class: np.ndarray) -> float:
    """TVD between the released joint (class x cell) and the counted empirical one."""
    p = shares(released.class_dp_counts)[:, None] * np.stack([shares(row) for row in dp_by_class])
    q = np.asarray(counts, dtype=np.float64)
    q /= max(1.0, q.sum())
    return float(0.5 * np.abs(q - p).sum())


def tvd_from_counts(released: Released, counts: dict[str, list[list[int]]]) -> dict[str, Any]:
    """TVD per histogram field, their mean, and the cohorts' TVD (None when not released)."""
    by_field = {name: _tvd(released, counts[name], released.dp_counts(name))
                for name in released.histograms}
    cohorts = None
    if released.cohorts:
        table = released.cohort_dp_counts().T
        cohorts = _tvd(released, counts["cohorts"], table)
    mean = float(np.mean(list(by_field.values()))) if by_field else None
    return {"histograms_mean": mean, "histograms": by_field, "cohorts": cohorts}


def released_tvd(released: Released, records: list[dict[str, Any]]) -> dict[str, Any]:
    """TVD per histogram field, their mean, and the cohorts' TVD (None when not released)."""
    return tvd_from_counts(released, cell_counts(released, records))
