"""The privacy unit: rows, or people whose rows OpenDP truncates to a bound."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

import polars as pl

from release.dp import prelude as dp

IdsT = TypeVar("IdsT", pl.Expr, pl.Series)
#: the frame column of a person's code (`unit_codes`), in every query that bounds people
UNIT_COL = "__unit"


@dataclass(frozen=True)
class PrivacyUnit:
    """Rows (``id_field`` None) or people whose rows OpenDP truncates to ``max_contributions``.

    ``id_field`` names the frame column that identifies a person (its `unit_codes`).
    """

    id_field: str | None = None
    max_contributions: int = 1

    def bounded(self, query: Any) -> Any:
        """A Context's ``query`` with each person's rows cut to ``max_contributions``
        (OpenDP's truncate_per_group). It keeps a person's first rows of the frame, which
        `release.dp.counts.make_context` shuffled once: a uniformly random sample of them,
        as OpenDP's own "sample", without its shuffle per person (most of the counts' time,
        and 8 GB, at 10^7 rows of 5 million people)."""
        if self.id_field is None:
            return query
        return query.truncate_per_group(self.max_contributions, keep="first")

    def opendp_unit(self) -> tuple:
        if self.id_field is None:
            return dp.unit_of(contributions=1)
        return dp.unit_of(contributions=1, identifier=pl.col(self.id_field))


def unit_codes(ids: IdsT) -> IdsT:
    """Each row's unit (a person id: an expression or a series) as a u32 code, the id's
    dense rank. Injective, so one person's rows stay one person's rows; OpenDP reads an
    identifier only to group rows by it (its truncations keep a unit's first, or a random,
    k rows), so a renumbering of the units changes no output's distribution. Cheaper to
    group by than the id's text at 10^7 rows, and exact where a hash could merge two
    people into one unit and break the per-person bound."""
    return ids.rank("dense")
