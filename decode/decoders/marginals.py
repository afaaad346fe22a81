"""The no-LLM baseline decoder: independent draws from the released class-conditional marginals.

Per record of class c:

- a categorical field takes a category with probability proportional to its clamped noisy
  count in c's histogram (uniform if every count clamps to 0);
- a numeric field takes a bin the same way, then a value uniformly from the bin's grid points
  at the field's precision (bins too narrow to hold a grid point get no mass);
- a field without a released histogram (never the case for the demo schema) is uniform over
  its enum or its public range (these three rules are `selpe_audit.artifact.sampling`'s,
  shared with the release's LLM candidates);
- a free-text field with a DP vocabulary whose topic x class counts were released (a
  model-mode artifact) takes a topic the same way - the text's class-conditional marginal -
  and writes its phrase or keyword; an "other" topic, and a field without such counts,
  copies the text of an exemplar (DP-selected winners and their partners, both synthetic)
  drawn from every class's exemplars alike, so the text carries no label signal that the
  release does not (issue 31: one exemplar per class made the text predict the label
  perfectly). An artifact without exemplars (``selection: null``, a counts-only release)
  copies one of the field's DP-released phrases or keywords instead (uniformly, alike in
  every class), and without those the field gets the neutral placeholder `PLACEHOLDER`
  (cut or padded to the field's length limits); provenance says which.

Record i of class c is drawn from its own generator seeded by (seed, c, i), so the stream is
the same however it is split into runs (a resumed decode continues it exactly).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from decode.decoders.registry import DecoderSpec, register
from decode.released import Released
from selpe_audit.artifact.model_block import DP_VOCABULARY
from selpe_audit.artifact.sampling import (
    draw_topic,
    draw_value,
    field_probs,
    has_topics_by_class,
    topic_text,
)
from selpe_audit.schema import Field

PLACEHOLDER = "not released"
#: provenance of a text drawn from the DP vocabulary's released topic x class counts
TOPICS_BY_CLASS = "dp topics x class"
_STREAM = 1  # separates these seeds from the other seeded draws of a decode


def _released_terms(released: Released, f: Field) -> list[str]:
    """The field's DP-released phrases or keywords that fit its length limits (the members
    of its "other" topic), or none."""
    t = released.topics.get(f.name)
    if t is None or t.other is None or not t.anchors:
        return []
    return [m for m in t.anchors[t.other].members if f.min_length <= len(m) <= f.max_length]


def placeholder_text(f: Field) -> str:
    """`PLACEHOLDER` cut to maxLength and padded with dots to minLength."""
    return PLACEHOLDER[:f.max_length].ljust(f.min_length, ".")


class MarginalsDecoder:
    """Samples records field by field from the released counts; the baseline for the LLM."""

    name = "marginals"

    def __init__(self, released: Released, seed: int) -> None:
        self.released, self.seed = released, seed
        self.schema = released.schema
        self.validity = 1.0  # every record is built valid; nothing is resampled
        # one pool per field, the same for every class: no label signal in the text
        self._texts = {f.name: [r[f.name] for c in released.classes
                                for r in (*released.winners[c], *released.partners[c])]
                       for f in self.schema.by_kind("text")}
        self._source = {name: "exemplars" for name, texts in self._texts.items() if texts}
        for f in self.schema.by_kind("text"):
            terms = _released_terms(released, f)
            if f.name not in self._source and terms:
                self._texts[f.name], self._source[f.name] = terms, DP_VOCABULARY
        self.uses_placeholder = any(not texts for texts in self._texts.values())
        # a released text model: the DP vocabulary's topic x class counts
        self._topics = {f.name: t for f in self.schema.by_kind("text")
                        if (t := released.topics.get(f.name)) is not None
                        and t.source == DP_VOCABULARY
                        and has_topics_by_class(t, len(released.classes))}
        # the shared rule (`selpe_audit.artifact.sampling`): the release's LLM candidates
        # draw their fields from the same counts the same way
        self._probs = field_probs(self.schema, released.view.counts)

    def probs(self, class_value: Any, name: str) -> np.ndarray:
        """The class's probabilities over the categories or bins of field ``name``."""
        return self._probs[class_value][name]

    def describe(self) -> dict[str, Any]:
        def source(name: str) -> str:
            other = self._source.get(name, "placeholder")
            return f"{TOPICS_BY_CLASS}, other: {other}" if name in self._topics else other

        return {"name": self.name,
                "text_source": {f.name: source(f.name) for f in self.schema.by_kind("text")},
                "placeholder": PLACEHOLDER if self.uses_placeholder else None}

    def record(self, class_value: Any, i: int) -> dict[str, Any]:
        """Record ``i`` of ``class_value``'s stream."""
        k = self.released.class_index(class_value)
        rng = np.random.default_rng([self.seed, _STREAM, k, i])
        return {f.name: class_value if f.name == self.schema.label else
                self.draw(f, class_value, rng) for f in self.schema.record_fields}

    def draw(self, f: Field, class_value: Any, rng: np.random.Generator) -> Any:
        """One value of field ``f`` for a record of ``class_value`` (not the label); the
        model decoder draws the fields its model lacks here too."""
        if f.kind == "text":
            vocab = self._topics.get(f.name)
            if vocab is not None:  # the class enters through the released counts alone
                text = topic_text(vocab, draw_topic(
                    vocab, self.released.class_index(class_value), rng), f)
                if text is not None:
                    return text
            pool = self._texts[f.name]  # the same pool for every class
            return pool[int(rng.integers(len(pool)))] if pool else placeholder_text(f)
        return draw_value(f, self._probs[class_value][f.name], rng)

    def generate(self, class_value: Any, start: int, total: int,
                 on_record: Callable[[dict[str, Any]], None]) -> None:
        """Records ``start .. total - 1`` of the class's stream, each handed to ``on_record``."""
        for i in range(start, total):
            on_record(self.record(class_value, i))



SPEC = register(DecoderSpec(
    name="marginals", help="the no-LLM baseline (independent fields per class)",
    build=lambda released, settings, seed, llm: MarginalsDecoder(released, seed)))
