"""The noisy counts in the configured mode (`release.counts`), with the plan's workload,
on what the row count and the phrase vocabularies left of the counts' budget."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from release.config import ReleaseConfig
from release.counts import CountsBudget, CountsRows, measure
from release.dp.unit import PrivacyUnit
from release.phrases import phrase_topics
from release.plan import ReleasePlan
from release.spent import Spent
from release.stages.phrases import CodedRows
from selpe_audit.artifact.records import LedgerEntry
from selpe_audit.schema import Schema


@dataclass(frozen=True)
class CountsReleased:
    """The artifact's ``counts`` block, its ledger entries and its spend."""

    block: dict[str, Any]
    entries: list[LedgerEntry]
    spent: Spent


def release_counts(cfg: ReleaseConfig, schema: Schema, coded: CodedRows, unit: PrivacyUnit,
                   codebooks: dict[str, Any], plan: ReleasePlan,
                   size: Spent) -> CountsReleased:
    """The counts of ``coded`` in ``cfg``'s mode; ``size``: what the row count spent."""
    topic_records = {name: cb.to_record() for name, cb in codebooks.items()}
    topic_records |= {name: phrase_topics(v) for name, v in coded.vocab.items()}
    rows = CountsRows(coded.frame, unit, coded.topics,
                      {n: v.slots for n, v in coded.vocab.items()}, topic_records, plan.workload)
    budget = CountsBudget(cfg.budget.counts_epsilon - size.epsilon - coded.spent.epsilon,
                          cfg.counts_delta - coded.spent.delta)
    out = measure(rows, schema, cfg.counts, budget)
    return CountsReleased(out.block, out.entries, Spent(out.epsilon, out.delta))
