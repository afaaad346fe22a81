"""The verified artifact as decode uses it: the schema, noisy counts as arrays, exemplars.

Built from `VerifiedRelease.view` (signatures checked before parsing, every shape checked
against the embedded schema there), so this module only turns the typed view into what the
decoders compute with. Everything here is public: DP outputs or post-processing of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from selpe_audit.artifact.document import VerifiedRelease
from selpe_audit.artifact.model_block import CountsModel, Topics
from selpe_audit.artifact.records import Cohorts
from selpe_audit.artifact.view import ReleaseView
from selpe_audit.schema import Field, Schema


@dataclass(frozen=True)
class Histogram:
    """Signed noisy counts of one field per class over its public categories or bins."""

    field: Field
    keys: tuple[Any, ...]
    dp_counts: np.ndarray  # (classes, keys)
    scale: float           # a cell's noise, for fit weights: the model's stddev in model
                           # modes, else the Laplace scale of the ledger

    def cells(self, values: Sequence[Any]) -> np.ndarray:
        """The category or bin index of every value (a bin: the count of inner edges at or
        below the value, as `Field.bin_index`)."""
        if self.field.kind == "categorical":
            at = {k: j for j, k in enumerate(self.keys)}
            return np.array([at[v] for v in values], dtype=np.intp)
        edges = np.asarray(self.field.bins[1:-1], dtype=np.float64)
        return np.searchsorted(edges, np.asarray(values, dtype=np.float64), side="right")


@dataclass(frozen=True)
class Cohort:
    """A released cohort's noisy counts per class (its rule is in ``Released.cohort_rules``)."""

    name: str
    dp_counts: np.ndarray  # (classes,)


@dataclass(frozen=True)
class Released:
    """What decode may use from one verified artifact."""

    view: ReleaseView
    schema: Schema
    classes: tuple[Any, ...]
    class_dp_counts: np.ndarray
    histograms: dict[str, Histogram]
    cohorts: tuple[Cohort, ...]
    cohort_scale: float
    winners: dict[Any, list[dict[str, Any]]]   # per class: latest round first, no repeats
    partners: dict[Any, list[dict[str, Any]]]  # per class: latest round first, no repeats
    kernel: dict[str, Any] | None               # the selection's kernel description

    def class_index(self, class_value: Any) -> int:
        return self.classes.index(class_value)

    def cohort_of(self, record: dict[str, Any]) -> int:
        """Index of the cohort that holds ``record`` (the catch-all if no rule matches)."""
        return self.view.counts.cohort_of(record)

    def exemplars(self, class_value: Any) -> list[dict[str, Any]]:
        """The class's winners, then its partners: every public record released for it."""
        return self.winners.get(class_value, []) + self.partners.get(class_value, [])

    def hints(self, class_value: Any) -> dict[str, str]:
        """Post-processing for prompts: the class's most likely category or bin per field."""
        return self.view.counts.class_hints()[class_value]

    @property
    def model(self) -> CountsModel | None:
        """The released noisy marginals of a model-mode artifact (None before model modes)."""
        return self.view.counts.model

    @property
    def topics(self) -> Mapping[str, Topics]:
        """Public topic codebooks of free-text fields, by field."""
        return self.view.counts.topics


def released_view(rel: VerifiedRelease) -> Released:
    """What decode uses of a verified release.json (a malformed one is a `UserError`)."""
    view = rel.view
    schema, counts = view.schema, view.counts
    classes = tuple(schema.classes)
    scales = view.ledger.scales()
    histograms = {
        name: Histogram(schema.field(name), h.keys, np.asarray(h.dp_counts_by_class,
                                                               dtype=np.int64),
                        float(h.stddev) if h.stddev is not None
                        else scales.get(h.mechanism_id or "", 1.0))
        for name, h in counts.histograms.items()}
    block: Cohorts | None = counts.cohorts
    cohorts = () if block is None else tuple(
        Cohort(str(c.name), np.asarray(c.dp_counts_by_class, dtype=np.int64))
        for c in block.cohorts)
    cohort_scale = 1.0 if block is None else scales.get(block.mechanism_id or "", 1.0)
    winners: dict[Any, list[dict[str, Any]]] = {c: [] for c in classes}
    partners: dict[Any, list[dict[str, Any]]] = {c: [] for c in classes}
    kernel = None
    if view.selection is not None:
        for c, recs in view.selection.latest_first("winner").items():
            winners[c] = recs
        for c, recs in view.selection.latest_first("partner").items():
            partners[c] = recs
        kernel = dict(view.selection.kernel or {})
    return Released(view, schema, classes,
                    np.asarray(counts.class_balance.dp_counts, dtype=np.int64), histograms,
                    cohorts, cohort_scale, winners, partners, kernel)
