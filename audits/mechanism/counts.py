"""The counts audit: one cell of an OpenDP histogram of the release's count plan."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import polars as pl

from audits.mechanism.core import Neighbours
from release.config_sections import CountsConfig
from release.counts.keys import CLASS_COL, derive_frame, key_col, public_values
from release.counts.marginals import plan_queries
from release.dp.counts import COUNT_COLUMN, make_context, make_count
from release.dp.unit import PrivacyUnit
from selpe_audit.demo.generator import generate_rows
from selpe_audit.schema import Schema

COUNTS_FIELD = "age"
COUNTS_ROWS = 200


def counts_neighbours(schema: Schema, epsilon: float, field: str = COUNTS_FIELD,
                      n_rows: int = COUNTS_ROWS, calibrate_to: float | None = None,
                      seed: int = 0) -> Neighbours:
    """A class-conditional histogram of ``field`` from the release's count plan, measured by
    OpenDP with the whole budget ``calibrate_to`` (default: the claim) on D and D'."""
    counts = CountsConfig(mode="marginals")
    qid = f"counts/histogram/{field}"
    plan = {q.id: q for q in plan_queries(schema, counts, epsilon)}
    if qid not in plan:
        raise ValueError(f"the count plan has no histogram of '{field}'")
    eps_q = calibrate_to if calibrate_to is not None else epsilon
    query = dataclasses.replace(plan[qid], epsilon=eps_q)
    rows = generate_rows(n_rows, seed)
    canary = generate_rows(1, seed + 1)[0]
    unit = PrivacyUnit()
    f = schema.field(field)
    cls = schema.classes.index(canary[schema.label])
    key = f.enum.index(canary[field]) if f.kind == "categorical" else f.bin_index(canary[field])
    cell = (pl.col(CLASS_COL) == cls) & (pl.col(key_col(field)) == key)
    samplers, scales = [], []
    for data in (rows, [*rows, canary]):
        frame = derive_frame(data, schema, counts, None).collect().lazy()
        m = make_count(make_context(frame, unit, [eps_q]), unit, query)
        scales.append(float(m.map(1)))

        def run(n: int, m: Any = m, frame: pl.LazyFrame = frame) -> np.ndarray:
            return np.fromiter((m(frame).collect().filter(cell)[COUNT_COLUMN].item()
                                for _ in range(n)), dtype=np.int64, count=n)

        samplers.append(run)
    details = {"query": qid, "cell": {"class": schema.classes[cls],
                                      field: public_values(f)[key]},
               "rows_in_D": n_rows, "constructor": "opendp.extras.polars: group_by().agg("
               "dp.len()) via release.dp.counts.make_count",
               "calibrated_to_epsilon": eps_q, "opendp_epsilon_at_d_in_1": scales[0]}
    return Neighbours(name="counts", claimed_epsilon=epsilon, run_d=samplers[0],
                      run_dprime=samplers[1], output="scalar", details=details)
