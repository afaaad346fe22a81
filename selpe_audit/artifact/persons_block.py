"""``persons``: the people tables of a schema with person structure (`release.persons`),
as both sides of the air gap read them. Every key is public (the schema's categories, the
visit counts 1..cap, the public gap bins, ``none``); every count is OpenDP's noisy integer,
signed (decoders clamp at 0)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from selpe_audit.artifact.records import OPEN, Count, Name

#: the key of "no next visit" (the person's last, before the cap)
NONE = "none"


@dataclass(frozen=True)
class PeopleTable:
    """Noisy counts over every combination of public values of ``fields``."""

    __pydantic_config__ = OPEN

    mechanism_id: str
    fields: tuple[str, ...]
    keys: tuple[tuple[Any, ...], ...]
    dp_counts: tuple[Count, ...]

    def counts(self) -> dict[tuple[Any, ...], float]:
        """Each key's count, clamped at 0 (post-processing)."""
        return {tuple(k): max(0.0, float(c))
                for k, c in zip(self.keys, self.dp_counts, strict=True)}


@dataclass(frozen=True)
class PersonsBlock:
    """The people tables, one flattened row per person: visits per person by the person
    fields; the first step - each transition field at the first visit against the second
    visit's label (or ``none``), and the label at the first visit against the gap to the
    second (a public gap bin, or ``none``). ``cap``: the visits of a person read (the first,
    in order); a visits count of ``cap`` reads "cap or more". The step tables are missing
    where the plan found the table too small for them."""

    __pydantic_config__ = OPEN

    order: Name
    cap: int
    person_fields: tuple[str, ...]
    nondecreasing: tuple[str, ...]
    gap_bins: tuple[float, ...]
    visits: PeopleTable
    next: dict[str, PeopleTable] | None = None
    gaps: PeopleTable | None = None
