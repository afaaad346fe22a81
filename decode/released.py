"""The verified artifact as decode uses it: the schema, noisy counts as arrays, exemplars.

Built from `VerifiedRelease.view` (signatures checked before parsing, every shape checked
against the embedded schema there). The histograms and cohorts are the artifact's own
records (`selpe_audit.artifact.records`), read through the checked view, so decode has no
second shape of them; this module only turns them into the arrays and noise scales the
decoders compute with. Everything here is public: DP outputs or post-processing of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from decode.people import PeopleModel, people_model
from selpe_audit.artifact.document import VerifiedRelease
from selpe_audit.artifact.model_block import CountsModel, Topics
from selpe_audit.artifact.records import Cohort, Histogram
from selpe_audit.artifact.view import ReleaseView
from selpe_audit.schema import Schema


@dataclass(frozen=True)
class Released:
    """What decode may use from one verified artifact."""

    view: ReleaseView
    schema: Schema
    classes: tuple[Any, ...]
    class_dp_counts: np.ndarray
    winners: dict[Any, list[dict[str, Any]]]   # per class: latest round first, no repeats
    partners: dict[Any, list[dict[str, Any]]]  # per class: latest round first, no repeats
    kernel: dict[str, Any] | None               # the selection's kernel description
    people: PeopleModel | None = None           # the people tables (person structure)

    @property
    def output_schema(self) -> Schema:
        """The schema the written records follow: with the person id when people are
        decoded (`decode.people`), else the records' own."""
        return self.schema if self.people is None else self.schema.with_person_ids()

    def class_index(self, class_value: Any) -> int:
        return self.classes.index(class_value)

    @property
    def histograms(self) -> Mapping[str, Histogram]:
        """The released class-conditional histograms, by field (the checked view's)."""
        return self.view.counts.histograms

    @property
    def cohorts(self) -> tuple[Cohort, ...]:
        """The released cohorts (none when the artifact has no cohorts block)."""
        block = self.view.counts.cohorts
        return () if block is None else block.cohorts

    def dp_counts(self, name: str) -> np.ndarray:
        """Field ``name``'s signed noisy counts as a (classes, keys) array."""
        return np.asarray(self.histograms[name].dp_counts_by_class, dtype=np.int64)

    def cohort_dp_counts(self) -> np.ndarray:
        """The cohorts' signed noisy counts as a (cohorts, classes) array."""
        return np.asarray([c.dp_counts_by_class for c in self.cohorts], dtype=np.int64)

    def scale(self, name: str) -> float:
        """A cell's noise in field ``name``'s histogram, for fit weights: the model's stddev
        in model modes, else the ledger's Laplace scale."""
        h = self.histograms[name]
        if h.stddev is not None:
            return float(h.stddev)
        return self.view.ledger.scales().get(h.mechanism_id or "", 1.0)

    @property
    def cohort_scale(self) -> float:
        """A cohort cell's noise: the ledger's scale of the cohorts' mechanism."""
        block = self.view.counts.cohorts
        if block is None:
            return 1.0
        return self.view.ledger.scales().get(block.mechanism_id or "", 1.0)

    def cells(self, name: str, values: Sequence[Any]) -> np.ndarray:
        """The category or bin index of every value of field ``name`` (a bin: the count of
        inner edges at or below the value, as `Field.bin_index`)."""
        field = self.schema.field(name)
        if field.kind == "categorical":
            at = {k: j for j, k in enumerate(self.histograms[name].keys)}
            return np.array([at[v] for v in values], dtype=np.intp)
        edges = np.asarray(field.bins[1:-1], dtype=np.float64)
        return np.searchsorted(edges, np.asarray(values, dtype=np.float64), side="right")

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
    winners: dict[Any, list[dict[str, Any]]] = {c: [] for c in classes}
    partners: dict[Any, list[dict[str, Any]]] = {c: [] for c in classes}
    kernel = None
    if view.selection is not None:
        for c, recs in view.selection.latest_first("winner").items():
            winners[c] = recs
        for c, recs in view.selection.latest_first("partner").items():
            partners[c] = recs
        kernel = dict(view.selection.kernel or {})
    people = None if view.persons is None else people_model(view.persons, schema)
    return Released(view, schema, classes,
                    np.asarray(counts.class_balance.dp_counts, dtype=np.int64),
                    winners, partners, kernel, people)
