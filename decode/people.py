"""Synthetic people from decoded visits: the visits any decoder made, put together into people
with the released people tables (`selpe_audit.artifact.persons_block`), after the fit.

Each person starts at a visit not yet used and grows a visit at a time, as a chain:

    stop at visit k      with the visits per person's stop rate at k (for the person's
                         fields), tilted by the step tables' "none" for this visit
    next visit's label   ~ the step tables' next label given this visit's transition fields
                         (their product over the prior: each table a likelihood of its own)
    next visit           an unused decoded visit with the person's fields, that label and the
                         same bin of each non-decreasing field (age), else any unused visit
                         with the person's fields and that label, else with the person's
                         fields; none left: the person ends
    gap to it            ~ the gap table's bin given this visit's label, a day drawn in it

Person fields are the first visit's in every visit, non-decreasing fields never go down,
the order field grows by the gaps (a person whose last visit would pass its maximum moves
earlier as a whole: the released table already saw the window's end), and every person
gets a fresh random id. The visits are the decoded ones, each written for
itself (its text too); only how they are grouped, their order field and their ids come
from here, so every decoder honours it and the class balance is the decode's. Without the
step tables (a table too small for them) visits are paired within the person's fields by
the visits per person alone. Everything here reads released counts only.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from selpe_audit.artifact.persons_block import NONE, PeopleTable, PersonsBlock
from selpe_audit.schema import Schema

#: ids of synthetic people: this letter and hexadecimal digits (never a real id's form)
ID_PREFIX = "S"


@dataclass(frozen=True)
class PeopleModel:
    """The released people tables as probabilities (post-processing: clamped at 0,
    normalised; an empty row falls back to the table's total, then to uniform)."""

    block: PersonsBlock
    schema: Schema
    stop: dict[tuple[Any, ...], np.ndarray]  # person fields -> P(stop at k | reached k)
    next: dict[str, dict[Any, np.ndarray]]   # field -> its value -> P(next label or none)
    prior_next: np.ndarray                   # P(next label or none), all steps
    gaps: dict[Any, np.ndarray]              # label -> P(gap bin | a next visit)

    @property
    def has_steps(self) -> bool:
        return bool(self.next)

    def stop_probability(self, person: tuple[Any, ...], k: int, visit: dict[str, Any]) -> float:
        """P(the person's visit ``k`` (1-based) is their last), given that visit."""
        base = float(self.stop[person][k - 1])
        if not self.has_steps:
            return base
        q = self.next_distribution(visit)
        odds = _odds(q[-1]) * _odds(base) / _odds(float(self.prior_next[-1]))
        return odds / (1 + odds)

    def next_distribution(self, visit: dict[str, Any]) -> np.ndarray:
        """P(next label, or none) given the visit's transition fields: the tables' product
        over the prior (each read as a likelihood of its own)."""
        log_p = np.zeros_like(self.prior_next)
        for f, rows in self.next.items():
            log_p += np.log(rows[visit[f]]) - np.log(self.prior_next)
        log_p += np.log(self.prior_next)
        p = np.exp(log_p - log_p.max())
        return p / p.sum()


def people_model(block: PersonsBlock, schema: Schema) -> PeopleModel:
    """The released people tables of a verified artifact, as `PeopleModel`."""
    labels = [*schema.classes, NONE]
    stop = {}
    for person, counts in _rows(block.visits, len(block.person_fields), range(1, block.cap + 1)
                                ).items():
        tail = np.cumsum(counts[::-1])[::-1]  # people with at least k visits
        stop[person] = np.where(tail > 0, counts / np.maximum(tail, 1e-12), 1.0)
        stop[person][-1] = 1.0  # the cap
    tables = (block.next or {}).items()
    nxt = {f: {key[0]: _normalised(p) for key, p in _rows(t, 1, labels).items()}
           for f, t in tables}
    prior = _normalised(sum((sum(_rows(t, 1, labels).values()) for _, t in tables),
                            np.zeros(len(labels))) if block.next else np.ones(len(labels)))
    bins = len(block.gap_bins) - 1
    gaps: dict[Any, np.ndarray] = {c: np.full(bins, 1 / bins) for c in schema.classes}
    if block.gaps is not None and schema.persons is not None:
        gap_keys = [*schema.persons.gap_labels(), NONE]
        gaps |= {key[0]: _normalised(p[:-1])
                 for key, p in _rows(block.gaps, 1, gap_keys).items()}
    return PeopleModel(block, schema, stop, nxt, prior, gaps)


@dataclass(frozen=True)
class Assembled:
    """Decoded visits grouped into people, and what the grouping did (public)."""

    rows: list[dict[str, Any]]
    people: int
    relabelled: int  # returns whose drawn label had no unused visit left: another label's
    unmatched: int   # returns drawn with no unused visit of the person's fields left


def assemble_people(records: list[dict[str, Any]], model: PeopleModel,
                    rng: np.random.Generator) -> Assembled:
    """``records`` (decoded visits) grouped into people, in order, each person's visits
    together with a fresh id (module docstring); every record is used once."""
    schema, block = model.schema, model.block
    label, order = schema.label, schema.field(block.order)
    bins = {f: schema.field(f) for f in block.nondecreasing}
    used = np.zeros(len(records), dtype=bool)
    pools: dict[tuple[Any, ...], list[int]] = defaultdict(list)
    for i in rng.permutation(len(records)):
        r = records[int(i)]
        person = tuple(r[f] for f in block.person_fields)
        band = tuple(bins[f].bin_index(r[f]) for f in bins)
        for key in ((person, band, r[label]), (person, r[label]), (person,)):
            pools[key].append(int(i))
    out: list[dict[str, Any]] = []
    ids = _fresh_ids(schema, rng)
    people = relabelled = unmatched = 0
    for start in rng.permutation(len(records)):
        if used[start]:
            continue
        used[start] = True
        visit = dict(records[int(start)])
        person = tuple(visit[f] for f in block.person_fields)
        visits = [visit]
        for k in range(1, block.cap):
            if rng.random() < model.stop_probability(person, k, visit):
                break
            nxt = _draw_label(model, visit, rng)
            band = tuple(bins[f].bin_index(visit[f]) for f in bins)
            j = _take(pools[(person, band, nxt)], used)
            if j is None:
                j = _take(pools[(person, nxt)], used)
            if j is None:
                j = _take(pools[(person,)], used)
                relabelled += j is not None
            if j is None:
                unmatched += 1
                break
            following = dict(records[j])
            following[block.order] = visit[block.order] + _draw_gap(model, visit[label],
                                                                     order, rng)
            for f in bins:  # the last visit's value in its band, else never lower
                same = bins[f].bin_index(following[f]) == bins[f].bin_index(visit[f])
                following[f] = visit[f] if same else max(following[f], visit[f])
            for f in block.person_fields:
                following[f] = visit[f]
            visits.append(following)
            visit = following
        _fit_window(visits, block.order, order.minimum, order.maximum)
        pid = next(ids)
        out.extend({schema.id_field: pid, **v} for v in visits)
        people += 1
    return Assembled(out, people, relabelled, unmatched)


def _fit_window(visits: list[dict[str, Any]], order: str, lo: float | None,
                hi: float | None) -> None:
    """A person whose last visit would fall past the order field's maximum moves earlier
    as a whole (gaps kept; the first visits clip at the minimum if the span is longer)."""
    late = visits[-1][order] - (math.inf if hi is None else hi)
    if late > 0:
        for v in visits:
            v[order] = max(v[order] - late, -math.inf if lo is None else lo)


def _draw_label(model: PeopleModel, visit: dict[str, Any], rng: np.random.Generator) -> Any:
    """The next visit's label: from the step tables (none left out), else the prior."""
    classes = model.schema.classes
    p = model.next_distribution(visit)[:-1] if model.has_steps else np.ones(len(classes))
    return classes[int(rng.choice(len(classes), p=_normalised(p)))]


def _draw_gap(model: PeopleModel, label: Any, order: Any, rng: np.random.Generator) -> float:
    """A gap drawn in a released gap bin, on the order field's grid."""
    edges = model.block.gap_bins
    j = int(rng.choice(len(edges) - 1, p=model.gaps[label]))
    lo, hi = edges[j], edges[j + 1]
    if order.is_integer:
        return int(rng.integers(math.ceil(lo), max(math.ceil(lo) + 1, math.ceil(hi))))
    return round(float(rng.uniform(lo, hi)), order.precision)


def _take(pool: list[int], used: np.ndarray) -> int | None:
    """An unused visit of ``pool`` (marked used), or None."""
    while pool:
        j = pool.pop()
        if not used[j]:
            used[j] = True
            return j
    return None


def _fresh_ids(schema: Schema, rng: np.random.Generator) -> Any:
    """Fresh random person ids of the id field's type: up to 15 hex digits as its maxLength
    allows (two alike among 10^6 people of separate chunks or shards: a chance of about
    4 x 10^-7), unique within one call."""
    f = schema.field(schema.id_field or "")
    digits = max(1, min(15, (f.max_length or 16) - len(ID_PREFIX)))
    seen: set[Any] = set()
    while True:
        value = int(rng.integers(0, 16 ** digits))
        pid: Any = value if f.json_type == "integer" else f"{ID_PREFIX}{value:0{digits}x}"
        if pid not in seen:
            seen.add(pid)
            yield pid


def _rows(table: PeopleTable, width: int, last: Any) -> dict[tuple[Any, ...], np.ndarray]:
    """A table's clamped counts by its first ``width`` keys, each an array over ``last``
    (the values of the next key, in that order)."""
    last = list(last)
    out: dict[tuple[Any, ...], np.ndarray] = {}
    for key, c in table.counts().items():
        row = out.setdefault(tuple(key[:width]), np.zeros(len(last)))
        row[last.index(key[width])] += c
    return out


def _normalised(p: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=float), 0, None) + 1e-9
    return p / p.sum()


def _odds(p: float) -> float:
    p = min(max(p, 1e-6), 1 - 1e-6)
    return p / (1 - p)
