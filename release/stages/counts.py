"""The noisy counts in the configured mode (`release.counts`), with the plan's workload,
on what the row count and the phrase vocabularies left of the counts' budget."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from release.config import ReleaseConfig
from release.counts import CountsBudget, CountsRows, measure
from release.dp.unit import PrivacyUnit
from release.phrases import phrase_topics
from release.plan import ReleasePlan
from release.spent import Spent
from release.stages.phrases import CodedRows
from release.topics import Codebook
from selpe_audit.artifact.records import LedgerEntry
from selpe_audit.artifact.view import Counts, counts_view
from selpe_audit.schema import Schema


@dataclass(frozen=True)
class CountsPart:
    """The document's ``counts`` in the mode's own shape (a plugin's mode writes its own),
    the mode's accounting of them in words, and the view of them the later stages read,
    parsed once."""

    json: dict[str, Any]
    accounting: str

    @cached_property
    def view(self) -> Counts:
        """The counts as decode reads them (the selection's LLM candidates and hints)."""
        return counts_view(self.json)

    @property
    def has_topic_column(self) -> bool:
        """Whether the released model has a free-text topic column (topic_share applies)."""
        model = self.json.get("model") or {}
        return any(c["kind"] == "topic" for c in model.get("columns", []))


@dataclass(frozen=True)
class CountsReleased:
    """The counts' block, its ledger entries and its spend."""

    block: CountsPart
    entries: list[LedgerEntry]
    spent: Spent


def release_counts(cfg: ReleaseConfig, schema: Schema, coded: CodedRows, unit: PrivacyUnit,
                   codebooks: dict[str, Codebook], plan: ReleasePlan,
                   size: Spent) -> CountsReleased:
    """The counts of ``coded`` in ``cfg``'s mode; ``size``: what the row count spent."""
    topic_records = {name: cb.to_record() for name, cb in codebooks.items()}
    topic_records |= {name: phrase_topics(v) for name, v in coded.vocab.items()}
    rows = CountsRows(coded.frame, unit, coded.topics,
                      {n: v.slots for n, v in coded.vocab.items()}, topic_records, plan.workload)
    budget = CountsBudget(*_marginals(cfg, plan, size + coded.spent))
    out = measure(rows, schema, cfg.counts, budget)
    return CountsReleased(CountsPart(out.block, out.words), out.entries,
                          Spent(out.epsilon, out.delta))


#: how far the row count's and the vocabularies' spend (OpenDP's maps) may sit from the
#: plan's split of them: float rounding
TOLERANCE = 1e-9


def _marginals(cfg: ReleaseConfig, plan: ReleasePlan, spent: Spent) -> tuple[float, float]:
    """What the counts' mechanisms get: the counts' share less what ran before them (the
    row count, the vocabularies: OpenDP's maps of them), refused unless that is the plan's
    split of it (the workload was sized from the split)."""
    left = (cfg.budget.counts_epsilon - spent.epsilon, cfg.counts_delta - spent.delta)
    planned = plan.marginals
    if any(abs(a - b) > TOLERANCE * max(1.0, abs(b)) for a, b in zip(left, planned, strict=True)):
        raise RuntimeError(f"the counts were planned with {planned} of the budget, but "
                           f"{left} is left: the split and the spend disagree")
    return left
