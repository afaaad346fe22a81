"""The phrase and keyword audits: the release's DP vocabulary (OpenDP's thresholded
counts) on one audited text."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from audits.mechanism.core import DEFAULT_DELTA, Neighbours
from release.dp.partition import TERM_COL, make_partition_counts, threshold_of
from release.dp.unit import PrivacyUnit
from release.phrases import term_frame

PHRASE = "fever"  # the audited phrase of `phrase_neighbours`
KEYWORD_TEXT, KEYWORDS = "fever and cough", ["fever", "cough"]  # its keyword case
PHRASE_UNITS = 300


def phrase_neighbours(epsilon: float, delta: float = DEFAULT_DELTA,
                      calibrate_to: float | None = None, n_units: int = PHRASE_UNITS,
                      kind: str = "phrases") -> Neighbours:
    """The release's DP phrase or keyword vocabulary (`release.phrases`: the same frame,
    truncation, OpenDP partition-selection query and calibration, built once per dataset and
    invoked per run) at ``calibrate_to`` (default: the claim), row unit, on D (``n_units``
    rows write the audited text, as many write texts of their own) and D' = D + one canary
    row writing it. Phrases: the text is one phrase, one term per unit. Keywords: the text
    holds two keywords and each unit counts for 2 (above the default 1: the harder case),
    so the canary moves two counts. The output is the sum of the audited terms' released
    noisy counts (0 for a term under the threshold: far above it here, so the audit sees
    the counts' noise); the test is a threshold; eps_LB uses the claimed delta (the
    threshold's share)."""
    eps_cal = calibrate_to if calibrate_to is not None else epsilon
    text, audited, per_unit = (PHRASE, [PHRASE], 1) if kind == "phrases" else \
        (KEYWORD_TEXT, KEYWORDS, len(KEYWORDS))
    texts = [text] * n_units + [f"a text of its own {i}" for i in range(n_units)]
    samplers, thresholds = [], []
    for data in (texts, [*texts, text]):
        frame = term_frame(pl.Series(data), PrivacyUnit(), None, kind).collect().lazy()
        _, m = make_partition_counts(frame, eps_cal, delta, per_unit=per_unit)
        thresholds.append(threshold_of(m))

        def run(n: int, m: Any = m, frame: pl.LazyFrame = frame) -> np.ndarray:
            def one() -> int:
                out = m(frame).collect().filter(pl.col(TERM_COL).is_in(audited))
                return int(out["dp_count"].sum())
            return np.fromiter((one() for _ in range(n)), dtype=np.int64, count=n)

        samplers.append(run)
    details = {"audited_terms": audited, "text_rows_in_D": n_units, "rows_in_D": 2 * n_units,
               "unit": "row", "per_unit": per_unit,
               "constructor": "release.dp.partition.make_partition_counts (opendp.extras.polars: "
               "group_by(term).agg(dp.len()) with OpenDP's threshold)",
               "calibrated_to_epsilon": eps_cal, "threshold": thresholds[0]}
    return Neighbours(name=kind, claimed_epsilon=epsilon, run_d=samplers[0],
                      run_dprime=samplers[1], output="scalar", details=details,
                      claimed_delta=delta)
