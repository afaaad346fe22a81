"""Structured field values drawn from a released ``counts`` block: post-processing, public.

One rule, shared by decode's marginals (and model) decoder and by the release's LLM
candidates, which take their fields from the counts released earlier in the same run:

- a categorical field takes a category with probability proportional to its clamped noisy
  count in the class's histogram (uniform if every count clamps to 0);
- a numeric field takes a bin the same way, then a value uniformly from the bin's grid points
  at the field's precision (bins too narrow to hold a grid point get no mass);
- a field without a released histogram is uniform over its enum or its public range.

Nothing here reads private data: the inputs are released numbers, the schema and a seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from selpe_audit.artifact.model_block import Topics
from selpe_audit.artifact.view import Counts
from selpe_audit.bins import grid_size, sample_in_bin
from selpe_audit.schema import Field, Schema

Probs = dict[Any, dict[str, np.ndarray]]  # class -> field name -> categories' or bins' shares


def shares(dp_counts: Sequence[float] | np.ndarray) -> np.ndarray:
    """Clamped, renormalised shares of signed noisy counts; uniform if all clamp to 0."""
    post = np.clip(np.asarray(dp_counts, dtype=np.float64), 0.0, None)
    if post.size == 0:
        raise ValueError("need at least one count to allocate over")
    total = post.sum()
    if total <= 0:
        return np.full(post.shape, 1.0 / post.size)
    return post / total


def _probs(f: Field, row: Sequence[Any] | None) -> np.ndarray:
    """Shares over the categories or bins of ``f`` from one class's noisy counts (or None)."""
    if f.kind == "categorical":
        return shares(row) if row is not None else np.full(len(f.enum), 1.0 / len(f.enum))
    sizes = np.array([grid_size(f, j) for j in range(len(f.bins) - 1)], dtype=np.float64)
    base = shares(row) if row is not None else sizes
    mass = np.where(sizes > 0, base, 0.0)
    return shares(mass if mass.sum() > 0 else sizes)


def field_probs(schema: Schema, counts: Counts | None) -> Probs:
    """Per class (the schema's order) and categorical or numeric field: its probabilities
    (uniform over the schema's values and ranges without ``counts``)."""
    out: Probs = {c: {} for c in schema.classes}
    for f in schema.record_fields:
        if f.kind not in ("categorical", "numeric"):
            continue
        h = counts.histograms.get(f.name) if counts is not None else None
        width = len(f.enum) if f.kind == "categorical" else len(f.bins) - 1
        rows = h.dp_counts_by_class if h is not None else ()
        for k, c in enumerate(schema.classes):
            row = rows[k] if k < len(rows) else None
            if row is not None and len(row) != width:
                raise ValueError(f"histogram of '{f.name}': {len(row)} counts for {width} cells")
            out[c][f.name] = _probs(f, row)
    return out


def draw_value(f: Field, probs: np.ndarray, rng: np.random.Generator) -> Any:
    """One value of categorical or numeric field ``f`` from its class's probabilities."""
    if f.kind == "categorical":
        return f.enum[int(rng.choice(len(f.enum), p=probs))]
    return sample_in_bin(f, int(rng.choice(len(f.bins) - 1, p=probs)), rng)


def has_topics_by_class(vocab: Topics | None, n_classes: int) -> bool:
    """Whether a free-text field's codebook carries released topic x class counts."""
    return vocab is not None and len(vocab.by_class) == n_classes and \
        all(len(row) >= len(vocab.anchors) for row in vocab.by_class)


def draw_topic(vocab: Topics, class_index: int, rng: np.random.Generator) -> int:
    """A topic for a record of the class, proportional to the released topic x class counts
    (clamped at 0; uniform when they all clamp, or when none were released)."""
    k = len(vocab.anchors)
    row = vocab.by_class[class_index] if class_index < len(vocab.by_class) else ()
    return int(rng.choice(k, p=shares(row[:k]) if len(row) >= k else None))


def topic_text(vocab: Topics, topic: int, f: Field) -> str | None:
    """A topic's released text when it is not "other" and fits the field."""
    text = vocab.anchors[topic].text
    return text if topic != vocab.other and f.min_length <= len(text) <= f.max_length else None


class FieldSampler:
    """Draws a record's label, categorical and numeric fields (no free text) per class."""

    def __init__(self, schema: Schema, counts: Counts | None) -> None:
        self.schema = schema
        self.probs = field_probs(schema, counts)

    def draw(self, class_value: Any, rng: np.random.Generator) -> dict[str, Any]:
        """One field set of ``class_value``, in schema order; free-text fields are left out."""
        probs = self.probs[class_value]
        return {f.name: class_value if f.name == self.schema.label else
                draw_value(f, probs[f.name], rng)
                for f in self.schema.record_fields if f.kind != "text"}
