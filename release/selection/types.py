"""What the selection's modules share: the private input, a round's output, the total.

Kept apart so the loop, the accounting and every mode import it and not each other.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from selpe_audit.artifact.records import SelectedClass, SelectionAccounting, SelectionRound
from selpe_audit.kernel.distance import Features, NumericScale
from selpe_audit.schema import Schema

#: Per class: the round's candidates' features and the numeric scales fitted on them (public).
Pools = dict[Any, tuple[Features, NumericScale]]


@dataclass
class PrivateClasses:
    """Per class: features of the private rows and the privacy-unit ids (in memory only)."""

    priv_features: dict[Any, Features]
    priv_unit_ids: dict[Any, list[str]]

    def __repr__(self) -> str:  # never print private content
        return f"PrivateClasses({len(self.priv_features)} classes)"


class OneClassPerUnit:
    """SelPE's private input: every privacy unit's rows in ONE class (in memory only).

    The constructor applies the rule, so no caller can hand SelPE's round a unit spread over
    several classes (it would move one batch in each, and classes would no longer compose in
    parallel): each unit keeps the class where it has most rows, ties broken by the order of
    ``priv_unit_ids`` (the schema's class order in the release). The choice reads that
    unit's rows alone, so one unit added or removed changes one unit of the output. Batches
    then take each unit whole (a keyed hash of its id), so one unit moves one batch.
    """

    __slots__ = ("priv_features", "priv_unit_ids")
    priv_features: dict[Any, Features]
    priv_unit_ids: dict[Any, list[str]]

    def __init__(self, priv: PrivateClasses | OneClassPerUnit) -> None:
        order = {c: i for i, c in enumerate(priv.priv_unit_ids)}
        per_unit: dict[str, Counter] = {}
        for c, ids in priv.priv_unit_ids.items():
            feats = priv.priv_features.get(c)
            if (feats.n if feats is not None else 0) != len(ids):
                raise ValueError("private features and unit ids disagree in size")
            for u in ids:
                per_unit.setdefault(u, Counter())[c] += 1
        keep = {u: min(n, key=lambda k: (-n[k], order[k])) for u, n in per_unit.items()}
        feats_out: dict[Any, Features] = {}
        ids_out: dict[Any, list[str]] = {}
        for c, ids in priv.priv_unit_ids.items():
            idx = [j for j, u in enumerate(ids) if keep[u] == c]
            ids_out[c] = [ids[j] for j in idx]
            if idx:
                f = priv.priv_features[c]
                feats_out[c] = f if len(idx) == f.n else f.take(idx)
        object.__setattr__(self, "priv_features", feats_out)
        object.__setattr__(self, "priv_unit_ids", ids_out)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("OneClassPerUnit is read-only")

    def __repr__(self) -> str:  # never print private content
        return f"OneClassPerUnit({len(self.priv_features)} classes)"


@dataclass
class RoundOutput:
    """One round's public outputs and accounting: epsilon for a pure mode; rho (zCDP) and
    mu (GDP) = sensitivity / scale for a zCDP mode."""

    round: int
    epsilon: float | None
    scale: float
    quota: int
    classes: list[SelectedClass] = field(default_factory=list)
    rho: float | None = None
    mu: float | None = None
    sensitivity: float = 1.0

    def to_record(self, pool_size: int) -> SelectionRound:
        """The round as the artifact's ``selection.rounds`` holds it."""
        return SelectionRound(self.round, tuple(self.classes), self.epsilon, self.scale,
                              self.quota, pool_size, self.rho, self.mu,
                              self.sensitivity if self.rho is not None else None)


@dataclass
class SelectionRun:
    rounds: list[RoundOutput]
    accounting: SelectionAccounting


def unit_ids(priv_rows: pl.DataFrame, schema: Schema, person_field: str | None) -> list[str]:
    """Each row's privacy unit id: the person id, or (row unit) the row's own content - never
    its position, which would depend on other rows."""
    if person_field:
        return [str(v) for v in priv_rows[person_field].to_list()]
    fields = [f.name for f in schema.record_fields]
    return [json.dumps(r, sort_keys=True)
            for r in priv_rows.select(fields).iter_rows(named=True)]

