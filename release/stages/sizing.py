"""The plan's one DP count of the rows, and the plan sized from it (`release.plan`)."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from release.config import ReleaseConfig
from release.counts.keys import derive_frame
from release.dp.counts import SIZE_CONSTRUCTOR, NoisyCount, measure_size
from release.dp.unit import PrivacyUnit
from release.enclave_log import EnclaveLog
from release.plan import ReleasePlan, budget_split, plan_release
from release.spent import Spent
from selpe_audit.artifact.records import LedgerEntry
from selpe_audit.schema import Schema

#: the ledger entry of the plan's row count
SIZE_ID = "counts/rows"


@dataclass(frozen=True)
class Sized:
    """The rows' DP count, the plan sized from it, and the count's ledger entry and
    spend."""

    size: NoisyCount
    plan: ReleasePlan
    entries: list[LedgerEntry]
    spent: Spent


def size_and_plan(cfg: ReleaseConfig, schema: Schema, rows: pl.DataFrame,
                  unit: PrivacyUnit, person_field: str | None, log: EnclaveLog,
                  ) -> tuple[pl.DataFrame, Sized]:
    """The rows as codes (`derive_frame`: each person's rows cut to their bound), then one
    DP count of them and each part of the release sized from it and public facts."""
    frame = derive_frame(rows, schema, cfg.counts, person_field).collect()
    split = budget_split(cfg, schema)  # once: the count, the plan and every stage read it
    size = measure_size(frame.lazy(), unit, split.size_epsilon)
    plan = plan_release(cfg, schema, size, split)
    log.write(f"plan: about {plan.rows} rows; vocabularies: "
              f"{', '.join(plan.vocabulary_fields) or 'none'}")
    entry = LedgerEntry(
        SIZE_ID, f"{size.mechanism} count of the rows, each person's cut to their bound: the "
        "size the release's plan is sized by", SIZE_CONSTRUCTOR, size.scale, size.epsilon, 0.0,
        "all rows", "sequential with the other count queries and the selection")
    return frame, Sized(size, plan, [entry], Spent(size.epsilon))
