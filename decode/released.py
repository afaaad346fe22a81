"""The verified artifact as decode sees it: the schema, the noisy counts and the exemplars.

Everything here comes out of a `VerifiedRelease` (its signatures checked before parsing) and
is public: DP outputs or post-processing of them. The counts block is only loosely typed in
the artifact's own JSON Schema, so its shapes are checked here; a signed but malformed block
is a one-line `UserError`, never a traceback.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from decode.allocation import shares
from selpe_audit.artifact.document import VerifiedRelease
from selpe_audit.errors import UserError
from selpe_audit.schema import Field, Schema, parse_schema


@dataclass(frozen=True)
class Histogram:
    """Signed noisy counts of one field per class over its public categories or bins."""

    field: Field
    keys: tuple[Any, ...]
    dp_counts: np.ndarray  # (classes, keys)
    scale: float           # the Laplace scale of every cell (ledger), for fit weights

    def cell(self, value: Any) -> int:
        """The category or bin index of a value of this field."""
        if self.field.kind == "categorical":
            return self.keys.index(value)
        return self.field.bin_index(float(value))


@dataclass(frozen=True)
class Cohort:
    """A released cohort rule (disjoint from the others) and its noisy counts per class.

    ``where`` is None for the catch-all "(other)" cohort: rows in no other cohort.
    """

    name: str
    where: dict[str, list[Any]] | None
    dp_counts: np.ndarray  # (classes,)

    def contains(self, record: dict[str, Any], schema: Schema) -> bool:
        assert self.where is not None
        for name, rule in self.where.items():
            value = record[name]
            if schema.field(name).kind == "numeric":
                if not rule[0] <= value <= rule[1]:
                    return False
            elif value not in rule:
                return False
        return True


@dataclass(frozen=True)
class Released:
    """What decode may use from one verified artifact."""

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
        for i, c in enumerate(self.cohorts):
            if c.where is not None and c.contains(record, self.schema):
                return i
        return next(i for i, c in enumerate(self.cohorts) if c.where is None)

    def exemplars(self, class_value: Any) -> list[dict[str, Any]]:
        """The class's winners, then its partners: every public record released for it."""
        return self.winners.get(class_value, []) + self.partners.get(class_value, [])

    def hints(self, class_value: Any) -> dict[str, str]:
        """Post-processing for prompts: the class's most likely category or bin per field."""
        k = self.class_index(class_value)
        return {name: str(h.keys[int(np.argmax(shares(h.dp_counts[k])))])
                for name, h in self.histograms.items()}


def released_view(rel: VerifiedRelease) -> Released:
    """Parse and check the parts of a verified release.json that decode uses."""
    doc = rel.doc
    schema = parse_schema(doc["schema"], source="release.json schema")
    if schema.sha256() != doc["schema_sha256"]:
        raise UserError("release.json: schema_sha256 does not match the embedded schema")
    try:
        return _view(doc, schema)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError):
        raise UserError("release.json: the counts or selection block is malformed; "
                        "use a selpe-audit version that matches the release") from None


def _scales(doc: dict[str, Any]) -> dict[str, float]:
    return {e["id"]: float(e["scale"]) for e in doc["ledger"]["entries"]}


def _view(doc: dict[str, Any], schema: Schema) -> Released:
    counts, scales = doc["counts"], _scales(doc)
    classes = tuple(schema.classes)
    balance = counts["class_balance"]
    if tuple(balance["classes"]) != classes:
        raise ValueError("class balance classes differ from the schema's label values")
    class_counts = _counts(balance["dp_counts"], (len(classes),))
    histograms = {}
    for name, h in counts["histograms"].items():
        f = schema.field(name)
        want = f.enum if f.kind == "categorical" else tuple(f.bin_labels())
        if f.kind not in ("categorical", "numeric") or tuple(h["keys"]) != tuple(want):
            raise ValueError(f"histogram keys of '{name}' differ from the schema")
        dp = _counts(h["dp_counts_by_class"], (len(classes), len(want)))
        histograms[name] = Histogram(f, tuple(want), dp, scales.get(h["mechanism_id"], 1.0))
    cohorts: tuple[Cohort, ...] = ()
    cohort_scale = 1.0
    if counts.get("cohorts"):
        block = counts["cohorts"]
        cohorts = tuple(Cohort(c["name"], c["where"] if isinstance(c["where"], dict) else None,
                               _counts(c["dp_counts_by_class"], (len(classes),)))
                        for c in block["cohorts"])
        if sum(c.where is None for c in cohorts) != 1:
            raise ValueError("cohorts need exactly one catch-all cohort")
        for c in cohorts:
            for name, rule in (c.where or {}).items():
                if schema.field(name).kind == "numeric" and len(rule) != 2:
                    raise ValueError(f"cohort '{c.name}' needs a [low, high] range for {name}")
        cohort_scale = scales.get(block["mechanism_id"], 1.0)
    winners, partners, kernel = _exemplars(doc.get("selection"), schema, classes)
    return Released(schema, classes, class_counts, histograms, cohorts, cohort_scale,
                    winners, partners, kernel)


def _counts(values: Any, shape: tuple[int, ...]) -> np.ndarray:
    a = np.asarray(values)
    if a.shape != shape or not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"expected integer counts of shape {shape}")
    return a.astype(np.int64)


def _exemplars(selection: dict[str, Any] | None, schema: Schema, classes: tuple[Any, ...],
               ) -> tuple[dict[Any, list[dict]], dict[Any, list[dict]], dict[str, Any] | None]:
    """Winners and partners per class, latest round first, each record once; all validated."""
    winners: dict[Any, list[dict]] = {c: [] for c in classes}
    partners: dict[Any, list[dict]] = {c: [] for c in classes}
    if not selection:
        return winners, partners, None
    validator = schema.record_validator()
    seen: set[str] = set()
    for rnd in sorted(selection["rounds"], key=lambda r: -int(r["round"])):
        for block in rnd["classes"]:
            c = block["class"]
            for kind, into in (("winners", winners), ("partners", partners)):
                for rec in block[kind]:
                    if not validator.is_valid(rec) or rec[schema.label] != c:
                        raise ValueError("an exemplar breaks the schema")
                    key = json.dumps(rec, sort_keys=True)
                    if key not in seen:
                        seen.add(key)
                        into[c].append(rec)
    return winners, partners, selection["kernel"]
