"""A schema's person structure: which field orders a person's visits and which fields are
the person's, so that the release can measure people, not only visits, and decode can
write people back - nothing about it is guessed from private data.

Top-level keywords (all optional but ``x-order``, which turns the structure on, and which
needs the person id ``x-id``):

- ``x-order``: the numeric field that orders a person's records (a day, an arrival
  index); it carries ``x-gap-bins``, the public bins of the difference between two
  consecutive records (from 0 to maximum - minimum);
- ``x-person-fields``: categorical fields constant across a person's records (sex);
- ``x-nondecreasing``: numeric fields that never go down along a person's records (age);
- ``x-transitions``: categorical fields whose value at one record is released against the
  next record's label (default: the label alone).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from selpe_audit.errors import UserError

if TYPE_CHECKING:
    import polars as pl

    from selpe_audit.schema import Field, Schema

KEYWORDS = frozenset({"x-order", "x-person-fields", "x-nondecreasing", "x-transitions"})


@dataclass(frozen=True)
class PersonStructure:
    """What the schema says about people (public)."""

    order: str
    gap_bins: tuple[float, ...]
    person_fields: tuple[str, ...]
    nondecreasing: tuple[str, ...]
    transitions: tuple[str, ...]

    def gap_labels(self) -> list[str]:
        """Public names of the gap bins, e.g. ``[2, 8)``."""
        from selpe_audit.schema import bin_labels

        return bin_labels(self.gap_bins)

    def gap_index(self, gap: float) -> int:
        """The gap bin of ``gap`` (>= 0)."""
        from selpe_audit.schema import bin_index

        return bin_index(self.gap_bins, gap)

    def gap_code(self, gap: pl.Expr) -> pl.Expr:
        """`gap_index` as a polars expression (a null gap stays null)."""
        import polars as pl

        inner = self.gap_bins[1:-1]
        if not inner:
            return pl.when(gap.is_null()).then(None).otherwise(0)
        return pl.when(gap.is_null()).then(None).otherwise(
            pl.sum_horizontal([gap >= e for e in inner]))


def person_structure(schema: Schema) -> PersonStructure:
    """``schema``'s person structure; a `ValueError` for a schema without one (callers
    check first: a release or an audit of people needs it)."""
    if schema.persons is None:
        raise ValueError(f"schema '{schema.name}' has no person structure (x-order)")
    return schema.persons


def parse_persons(raw: Mapping[str, Any], fields: Sequence[Field], id_field: str | None,
                  label: str, bad: Callable[[str], UserError]) -> PersonStructure | None:
    """The structure ``raw`` declares, checked against its fields; None without
    ``x-order``."""
    given = sorted(k for k in KEYWORDS if k in raw)
    if "x-order" not in raw:
        if given:
            raise bad(f"{', '.join(given)} need \"x-order\": the field that orders a "
                      "person's records")
        return None
    if id_field is None:
        raise bad('"x-order" needs "x-id": the field that says whose record it is')
    by_name = {f.name: f for f in fields}
    order = by_name.get(raw["x-order"]) if isinstance(raw["x-order"], str) else None
    if order is None or order.kind != "numeric":
        raise bad(f"x-order names {raw['x-order']!r}, which is not a numeric property")
    strays = [n for n, spec in raw["properties"].items()
              if isinstance(spec, dict) and "x-gap-bins" in spec and n != order.name]
    if strays:
        raise bad(f"field '{strays[0]}': x-gap-bins belongs to the x-order field only")
    span = (order.maximum or 0) - (order.minimum or 0)
    gaps = raw["properties"][order.name].get("x-gap-bins")
    if (not isinstance(gaps, list) or len(gaps) < 2
            or not all(isinstance(x, int | float) and math.isfinite(x) for x in gaps)
            or any(b <= a for a, b in itertools.pairwise(gaps))
            or gaps[0] != 0 or gaps[-1] != span):
        raise bad(f"field '{order.name}' (x-order): give \"x-gap-bins\", strictly increasing "
                  f"edges from 0 to {span:g} (maximum - minimum): the public bins of the gap "
                  "between a person's consecutive records")

    def names(key: str, kind: str, default: Sequence[str] = ()) -> tuple[str, ...]:
        value = raw.get(key, list(default))
        if not (isinstance(value, list) and all(isinstance(x, str) for x in value)):
            raise bad(f'"{key}" must be a list of field names')
        for x in value:
            if x not in by_name or by_name[x].kind != kind or x == order.name:
                raise bad(f"{key} names '{x}', which is not a {kind} property "
                          "other than the order")
        return tuple(value)

    person = names("x-person-fields", "categorical")
    if label in person:
        raise bad(f"x-person-fields names the label '{label}': a label varies by record")
    transitions = names("x-transitions", "categorical", [label])
    if set(transitions) & set(person):
        raise bad("x-transitions names a person field: it is constant, so it has no "
                  "transition")
    return PersonStructure(order.name, tuple(float(g) for g in gaps), person,
                           names("x-nondecreasing", "numeric"), transitions)
