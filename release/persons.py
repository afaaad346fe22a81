"""People, not only visits: each person's visits flattened into one row of public codes,
and the people tables counted over those rows through OpenDP (the flattening of PrivLava,
SIGMOD 2023: a parent with its capped children is one row of the measurement).

A person's visits are put in order (the schema's ``x-order``; ties by the visits' codes, so
the order depends on the person's own visits alone) and cut to the first ``cap``. The
person's row holds:

- the person fields (their first visit's values) and the number of visits, 1..cap (cap
  reads "cap or more");
- the first step: the transition fields' codes at the first visit, the second visit's
  label (or ``none``: a person with one visit) and the gap between the two (a public bin,
  or ``none``).

A person added to or removed from the table adds or removes one row, carrying the person's
unit code: OpenDP bounds each person to one row (its truncation per identifier) and derives
the noise from that bound, so each table's sensitivity is 1 person. Each table is a Laplace
count over every public key (empty keys included), pure epsilon-DP, at what the plan gave
the people tables (`release.plan`). Only the first step is measured (one row a person):
decode takes every later step by the same law, and each visit's chance to be the last from
the visits per person (`decode.people`).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from release.counts.keys import CODE, full_keys, key_col, key_expr
from release.dp.counts import CountQuery, NoisyCounts, release_counts
from release.dp.unit import UNIT_COL, PrivacyUnit, unit_codes
from selpe_audit.artifact.persons_block import NONE, PeopleTable, PersonsBlock
from selpe_audit.artifact.records import LedgerEntry
from selpe_audit.person_schema import person_structure
from selpe_audit.schema import Schema

VISITS_COL = "__visits"
NEXT_COL = "__next"
GAP_COL = "__gap"
_ORDER = "__order"
_SLOT = "__slot"
_COUNT = "__n"
#: ledger ids: the visits per person, each transition field's first step, the first gap
VISITS_ID = "persons/visits"
GAPS_ID = "persons/gaps"
COMPOSITION = "sequential with the other count queries and the selection"


def next_id(field: str) -> str:
    return f"persons/next/{field}"


def people_rows(rows: pl.DataFrame, schema: Schema, person_field: str,
                cap: int) -> pl.DataFrame:
    """One row per person of the typed private ``rows`` (module docstring)."""
    s = person_structure(schema)
    fields = dict.fromkeys([*s.person_fields, *s.transitions, schema.label])
    codes = [key_col(f) for f in fields]
    label = key_col(schema.label)
    gap = pl.col(_ORDER).shift(-1).over(UNIT_COL) - pl.col(_ORDER)
    return (rows.lazy()
            .select(unit_codes(pl.col(person_field)).alias(UNIT_COL),
                    pl.col(s.order).cast(pl.Float64).alias(_ORDER),
                    *[key_expr(schema.field(f)).alias(key_col(f)) for f in fields])
            .sort([UNIT_COL, _ORDER, *codes])
            .with_columns(pl.int_range(pl.len()).over(UNIT_COL).alias(_SLOT),
                          pl.len().over(UNIT_COL).alias(_COUNT),
                          pl.col(label).shift(-1).over(UNIT_COL)
                          .fill_null(len(schema.classes)).cast(CODE).alias(NEXT_COL),
                          s.gap_code(gap).fill_null(len(s.gap_bins) - 1).cast(CODE)
                          .alias(GAP_COL))
            .filter(pl.col(_SLOT) == 0)
            .select(UNIT_COL,  # (min_horizontal would lose the cast: polars 1.36)
                    pl.col(_COUNT).clip(upper_bound=cap).sub(1).cast(CODE).alias(VISITS_COL),
                    *codes, NEXT_COL, GAP_COL)
            .collect())


@dataclass(frozen=True)
class PeoplePlan:
    """Which people tables run, each at ``epsilon`` (the plan's choice)."""

    cap: int
    epsilon: float
    steps: bool  # the transition and gap tables (else the visits table alone)
    transitions: int  # the schema's transition fields: one step table each, and the gaps

    @property
    def tables(self) -> int:
        """How many tables run (each at ``epsilon``)."""
        return 1 + (self.transitions + 1 if self.steps else 0)


@dataclass(frozen=True)
class PeopleMeasured:
    block: PersonsBlock
    entries: list[LedgerEntry]
    epsilon: float


def measure_people(people: pl.DataFrame, schema: Schema, plan: PeoplePlan) -> PeopleMeasured:
    """The people tables ``plan`` runs over the ``people`` rows (`people_rows`), through one
    OpenDP Context."""
    s = person_structure(schema)
    queries = [_visits_query(schema, plan), *(_step_queries(schema, plan) if plan.steps else [])]
    released = release_counts(people.lazy(), PrivacyUnit(UNIT_COL, 1), queries)
    tables = {r.id: _table(r, schema, plan.cap) for r in released.results}
    block = PersonsBlock(
        s.order, plan.cap, s.person_fields, s.nondecreasing, s.gap_bins, tables[VISITS_ID],
        {f: tables[next_id(f)] for f in s.transitions} if plan.steps else None,
        tables.get(GAPS_ID))
    entries = [LedgerEntry(r.id, r.mechanism, r.constructor, r.scale, r.epsilon, 0.0,
                           r.scope, r.composition) for r in released.results]
    return PeopleMeasured(block, entries, released.total_epsilon)


def _visits_query(schema: Schema, plan: PeoplePlan) -> CountQuery:
    s = person_structure(schema)
    by = {key_col(f): len(schema.field(f).enum) for f in s.person_fields}
    by[VISITS_COL] = plan.cap
    return CountQuery(VISITS_ID, tuple(by), full_keys(by), plan.epsilon,
                      f"one row per person; {' x '.join([*s.person_fields, 'visits'])}, "
                      f"visits 1..{plan.cap} ({plan.cap} or more)", COMPOSITION)


def _step_queries(schema: Schema, plan: PeoplePlan) -> list[CountQuery]:
    s = person_structure(schema)
    n_next = len(schema.classes) + 1
    out = [CountQuery(next_id(f), (key_col(f), NEXT_COL),
                      full_keys({key_col(f): len(schema.field(f).enum), NEXT_COL: n_next}),
                      plan.epsilon, f"one row per person; {f} at the first visit x the "
                      f"second visit's {schema.label} or none", COMPOSITION)
           for f in s.transitions]
    label = key_col(schema.label)
    out.append(CountQuery(GAPS_ID, (label, GAP_COL),
                          full_keys({label: len(schema.classes), GAP_COL: len(s.gap_bins)}),
                          plan.epsilon, f"one row per person; {schema.label} at the first "
                          "visit x the gap to the second (public bins) or none", COMPOSITION))
    return out


def _table(r: NoisyCounts, schema: Schema, cap: int) -> PeopleTable:
    """A measured table with public values for its codes."""
    s = person_structure(schema)
    names = {VISITS_COL: "visits", NEXT_COL: f"next {schema.label}", GAP_COL: "gap"}
    values = {VISITS_COL: list(range(1, cap + 1)),
              NEXT_COL: [*schema.classes, NONE], GAP_COL: [*s.gap_labels(), NONE]}
    cols = list(r.table.columns[:-1])
    fields, decode = [], []
    for c in cols:
        if c in names:
            fields.append(names[c])
            decode.append(values[c])
        else:
            name = c.removeprefix(key_col(""))
            fields.append(name)
            decode.append(list(schema.field(name).enum))
    table = r.table.sort(cols)
    keys = tuple(tuple(decode[j][code] for j, code in enumerate(row))
                 for row in table.select(cols).iter_rows())
    return PeopleTable(r.id, tuple(fields), keys, tuple(int(c) for c in table[r.table.columns[-1]]))
