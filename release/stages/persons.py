"""The people tables (`release.persons`), for a schema with person structure, at what the
plan gave them; run right after the plan's row count, before the counts, whose share pays
for them."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from release.enclave_log import EnclaveLog
from release.persons import measure_people, people_rows
from release.plan import ReleasePlan
from release.spent import Spent
from selpe_audit.artifact.persons_block import PersonsBlock
from selpe_audit.artifact.records import LedgerEntry
from selpe_audit.schema import Schema


@dataclass(frozen=True)
class PeopleReleased:
    """The people tables' block, their ledger entries and their spend."""

    block: PersonsBlock
    entries: list[LedgerEntry]
    spent: Spent


def release_people(schema: Schema, rows: pl.DataFrame, person_field: str | None,
                   plan: ReleasePlan, log: EnclaveLog) -> PeopleReleased | None:
    """The people tables of the typed private ``rows``, or None where the plan runs none."""
    if plan.people is None or person_field is None:
        return None
    people = people_rows(rows, schema, person_field, plan.people.cap)
    log.write(f"people tables: {people.height} people")
    measured = measure_people(people, schema, plan.people)
    return PeopleReleased(measured.block, measured.entries, Spent(measured.epsilon))
