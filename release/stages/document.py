"""The artifact's document, built from what the release's stages released: the schema, the
privacy unit and how each mechanism bounds it, the budget and the plan, the ledger, the
derived guarantees, the counts and the selection. Nothing here reads a private row."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from release.config import ReleaseConfig
from release.counts import get as counts_mode
from release.phrases import TERM_KINDS
from release.plan import ReleasePlan
from release.private_data import source_description
from release.selection import get
from release.spent import MechanismStage, ledger_entries, total_spent
from release.stages.counts import CountsPart
from release.stages.selection import SelectionPart, SelectionReleased
from release.stages.sizing import SIZE_ID
from selpe_audit.artifact.counts_modes import describe_counts
from selpe_audit.artifact.document import FORMAT, FORMAT_VERSION, tool_versions
from selpe_audit.artifact.guarantees import derived_guarantees, gdp_interpretation, protects
from selpe_audit.artifact.persons_block import PersonsBlock
from selpe_audit.artifact.records import (
    Budget,
    Guarantees,
    Ledger,
    LedgerEntry,
    LifetimeStamp,
    Source,
    UnitRecord,
    json_form,
)
from selpe_audit.schema import Schema

SIZE_ACCOUNTANT = "a Context in pure epsilon-DP for the row count the plan is sized by"
PERSONS_ACCOUNTANT = ("a Context in pure epsilon-DP for the people tables (one flattened row "
                      "per person)")
#: the ledger ids of the people tables (`release.persons`)
PERSONS_PREFIX = "persons/"
PHRASES_ACCOUNTANT = ("a Context in (epsilon, delta)-DP per free-text field's phrase "
                      "vocabulary (partition selection)")
PURE_SELECTION_ACCOUNTANT = ("an adaptive compositor over the selection rounds, each "
                             "entry's epsilon from its privacy map")
GAUSSIAN_SELECTION_ACCOUNTANT = (
    "an adaptive compositor in zero-concentrated DP over the Gaussian selection rounds (rho "
    "adds up), whose total rho OpenDP converts to (epsilon, delta) at the configured delta "
    "(selection/zcdp-to-approx-dp); round entries state rho and mu, their epsilon is counted "
    "in the conversion entry")


@dataclass(frozen=True)
class DocumentDraft:
    """The artifact's document as the release built it, before it is written and signed:
    records, made JSON once by the signing stage (`to_json`; the artifact's own top-level
    record, `selpe_audit.artifact.document.ReleaseDocument`, is what a reader parses)."""

    dataset: str
    source: Source
    schema: Schema
    privacy_unit: UnitRecord
    release_key_id: str
    budget: Budget
    ledger: Ledger
    guarantees: Guarantees
    counts: CountsPart
    selection: SelectionPart | None
    created: str
    persons: PersonsBlock | None = None

    def to_json(self) -> dict[str, Any]:
        """The document as release.json holds it."""
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "tool": tool_versions(),
            "dataset": self.dataset,
            "source": json_form(self.source),
            "schema": self.schema.public_json(),
            "schema_sha256": self.schema.sha256(),
            "privacy_unit": json_form(self.privacy_unit),
            "release_key_id": self.release_key_id,
            "budget": json_form(self.budget),
            "ledger": json_form(self.ledger),
            "guarantees": json_form(self.guarantees),
            "counts": self.counts.json,
            "selection": None if self.selection is None else self.selection.to_json(),
            **({} if self.persons is None else {"persons": json_form(self.persons)}),
            "created": self.created,
        }


def build_document(cfg: ReleaseConfig, schema: Schema, release_key_id: str,
                   stages: list[MechanismStage], counts: CountsPart,
                   selection: SelectionReleased | None = None, *,
                   lifetime: LifetimeStamp | None = None, source_key: bytes,
                   plan: ReleasePlan | None = None,
                   persons: PersonsBlock | None = None) -> DocumentDraft:
    """The artifact's document from what the ``stages`` released (their ledger entries and
    spend, in the order they ran); ``source_key``: the enclave secret that keys a database
    query's HMAC (the ledger folder's key); ``plan``: what the release sized to the table;
    ``persons``: the people tables, for a schema with person structure."""
    entries, spent = ledger_entries(stages), total_spent(stages)
    unit = privacy_unit(cfg, schema, selection is not None)
    mu = selection.mu if selection is not None else None
    guarantees = derived_guarantees(spent.epsilon, spent.delta, json_form(unit))
    if mu is not None:
        guarantees = replace(guarantees, selection_gdp=gdp_interpretation(
            mu, counts=counts_accounting(counts, entries)))
    vocabularies = plan.vocabulary_fields if plan is not None else cfg.phrase_fields(schema)
    accountant = _accountant(cfg, bool(vocabularies), mu, selection is not None,
                             persons is not None)
    return DocumentDraft(
        cfg.dataset, source_description(cfg.source, source_key), schema, unit, release_key_id,
        budget_block(cfg, schema, counts, bool(vocabularies), lifetime, plan),
        Ledger(tuple(entries), spent.epsilon, spent.delta, accountant), guarantees, counts,
        selection.block if selection is not None else None,
        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), persons)


def budget_block(cfg: ReleaseConfig, schema: Schema, counts: CountsPart,
                 vocabularies: bool, lifetime: LifetimeStamp | None,
                 plan: ReleasePlan | None) -> Budget:
    """The artifact's ``budget``: the epsilon, its shares, what the counts mode split, the
    lifetime caps in force and the plan."""
    budget, c = cfg.budget, cfg.counts
    caps = ((budget.lifetime_epsilon, budget.lifetime_delta) if lifetime is None else
            (lifetime.lifetime_epsilon, lifetime.lifetime_delta))
    return Budget(
        budget.epsilon, cfg.release_delta,
        {"counts": budget.counts_share, "selection": budget.selection_share},
        counts={"mode": c.mode, "class_share": c.class_share,
                "topic_share": (c.topic_share if describe_counts(c.mode).topic_share and
                                counts.has_topic_column else 0.0),
                "topics": cfg.topics,
                "phrase_share": c.phrase_share if vocabularies else 0.0,
                "delta": cfg.counts_delta,
                "gamma": c.table_shares(schema)[0],
                "alpha": c.table_shares(schema)[1],
                "n_min": c.n_min},
        lifetime_epsilon=caps[0], lifetime_delta=caps[1], lifetime_ledger=lifetime,
        plan=plan.record if plan is not None else None,
        leave_out_exhausted=cfg.leave_out_exhausted or None)


def counts_accounting(counts: CountsPart, entries: list[LedgerEntry]) -> str:
    """The noisy counts' accounting in words: the mode's own, plus the row count the plan
    was sized by and the phrase vocabularies (each its own (epsilon, delta)), which also
    come out of the counts' share."""
    words = counts.accounting
    size = next((e for e in entries if e.id == SIZE_ID), None)
    if size is not None:
        words += f" plus the row count's pure epsilon {size.epsilon:.4g}"
    people = [e for e in entries if e.id.startswith(PERSONS_PREFIX)]
    if people:
        words += (f" plus the people tables' pure epsilon "
                  f"{sum(e.epsilon for e in people):.4g}")
    phrases = [e for e in entries if _is_vocabulary(e.id)]
    if phrases:
        words += (f" plus ({sum(e.epsilon for e in phrases):.4g}, "
                  f"{sum(e.delta for e in phrases):.3g})-DP phrase vocabularies")
    return words


def _is_vocabulary(entry_id: str) -> bool:
    """Whether a ledger entry is a free-text field's phrase vocabulary
    (``counts/<kind>/<field>``, `release.stages.phrases`)."""
    parts = entry_id.split("/")
    return len(parts) == 3 and parts[0] == "counts" and parts[1] in TERM_KINDS


def _accountant(cfg: ReleaseConfig, vocabularies: bool, selection_mu: float | None,
                selects: bool, people: bool) -> str:
    """How the ledger's entries add up, in words: the plan's row count, the people tables
    and the phrase vocabularies (where they ran), the counts mode's own accountant, the
    selection's; the parts compose sequentially."""
    parts = [SIZE_ACCOUNTANT, *([PERSONS_ACCOUNTANT] if people else []),
             *([PHRASES_ACCOUNTANT] if vocabularies else [])]
    parts.append(counts_mode(cfg.counts.mode).accountant)
    if selects:
        parts.append(GAUSSIAN_SELECTION_ACCOUNTANT if selection_mu is not None
                     else PURE_SELECTION_ACCOUNTANT)
    return (f"OpenDP: {'; '.join(parts)}. The parts compose sequentially (epsilons and "
            "deltas add), each entry's epsilon from OpenDP's privacy map")


def privacy_unit(cfg: ReleaseConfig, schema: Schema, selects: bool) -> UnitRecord:
    """The unit, what the guarantee protects, and how each mechanism bounds one unit."""
    pu = cfg.privacy_unit.resolved(schema)
    if pu.unit == "person":
        bounding = {"counts": f"OpenDP truncate_per_group: each person's rows are cut to a "
                              f"random sample of at most {pu.max_contributions} before every "
                              "count"}
        if selects:
            bounding["selection"] = get(cfg.selection.mode).descriptor.person_bounding
        unit = UnitRecord("person", pu.id_field or schema.id_field, pu.max_contributions)
    else:
        bounding = {"counts": "each row is counted once per query",
                    "group": "a person with m rows is protected at m times epsilon"}
        if selects:
            bounding["selection"] = "each row sits in one batch of its class per round"
        unit = UnitRecord("row")
    return replace(unit, protects=protects(json_form(unit)), bounding=bounding)
