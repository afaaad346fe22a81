"""The LLM decoder on a model-mode artifact: the released model gives every field, the LLM
writes only the free text.

Each record's structured fields and text topics come from the `model` decoder's stream (the
released graphical model, exactly as ``--decoder model`` draws them), so they are as good as
its records and the LLM can never change them: they are fed to the model as the prompt, not
sampled. Per free-text field, the LLM continues a plain-completion prompt (`prompts.text_prefix`
+ `prompts.text_suffix`): the class, the class's DP-selected exemplars as a few-shot list, the
record's topic texts (public anchors) and the record's fields, then an opening quote; the text
ends at the closing quote. A record whose topic is a released *phrase* (a short-text field's
DP vocabulary) keeps that phrase as the model decoder wrote it: the LLM writes "other" and
long-text (keyword) topics, where the model has no text of its own, and rewrites released
phrases only with ``paraphrase_phrases`` (off: measured to vary the text but carry less of
the label, the retired study `paraphrase` in benchmarks/RESULTS.md). A keyword topic's text
opens with the record's released keywords, and the LLM writes on from them (`_opening`).
An "other" record's text may not be a released term, and a keyword field's "other" record
is shown none (`selpe_audit.llm.text.other_draft`).
A text is kept when it fits the field's length limits, is not a placeholder (the field's name
or description, an enum value, "free text") or an echo of the fields line, goes on past
its opening and is not refused; otherwise it is resampled, and after ``max_attempts`` the
record keeps the topic's public text (counted).
The text writing is `selpe_audit.llm.text.TextWriter`'s, shared with the release's LLM
candidates; this module draws the fields and chunks the stream.

Resumable stream as the two-stage decoder: chunk j of a class is generated with seeds from
(seed, class, j), its records in index order, so a resumed decode regenerates the chunk it
was in and drops what it already has.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import numpy as np

from decode.decoders.model import ModelDecoder
from decode.decoders.stream import CHUNK, POSITIVES, chunk_seed
from decode.released import Released
from selpe_audit.artifact.model_block import DP_VOCABULARY, Topics
from selpe_audit.artifact.sampling import topic_text
from selpe_audit.llm import prompts
from selpe_audit.llm.config import GenerationConfig, derive_seed
from selpe_audit.llm.models import LLM
from selpe_audit.llm.text import (
    TOPIC_TEXTS,
    Draft,
    TextStats,
    TextWriter,
    example_hints,
    other_draft,
    placeholder_words,
    released_terms,
)
from selpe_audit.schema import Field

__all__ = ["HybridDecoder", "placeholder_words"]


class HybridDecoder:
    """Fields from the released model, free text from the LLM (see module)."""

    name = "llm"

    def __init__(self, released: Released, llm: LLM, *, seed: int,
                 config: GenerationConfig | None = None,
                 paraphrase_phrases: bool = False) -> None:
        self.released, self.llm, self.seed = released, llm, seed
        self.paraphrase_phrases = paraphrase_phrases
        self.config = config or GenerationConfig(seed=seed)
        self.model = ModelDecoder(released, seed)
        self.schema = released.schema
        self.text_fields = list(self.schema.by_kind("text"))
        self.writer = TextWriter(self.schema, llm, self.config)
        self._released_terms = {name: released_terms(vocab)  # refused by "other" drafts
                                for name, vocab in released.topics.items()
                                if vocab.source == DP_VOCABULARY}
        self.validity = 1.0  # the fields are built valid; texts are checked before use

    @property
    def stats(self) -> TextStats:
        """Counters of every text written so far (no text content)."""
        return self.writer.stats

    def describe(self) -> dict[str, Any]:
        generation = {k: v for k, v in asdict(self.config).items()
                      if k in ("temperature", "top_k", "top_p", "n_parallel", "max_attempts")}
        return {"name": self.name, "fields_from": "the released counts model",
                "counts_model": self.model.describe()["counts_model"],
                "text_fields": [f.name for f in self.text_fields],
                "model": {"name": self.llm.info.name, "sha256": self.llm.info.sha256},
                "generation": generation, "chunk": CHUNK, "positives": POSITIVES,
                "topic_texts": TOPIC_TEXTS, "paraphrase_phrases": self.paraphrase_phrases,
                "prompt_templates_sha256": prompts.templates_digest()}

    def acceptable(self, f: Field, text: str, opening: str = "",
                   refused: frozenset[str] = frozenset()) -> bool | None:
        """True: keep; False: a placeholder, an echo, its opening alone or a refused text;
        None: outside the field's length limits."""
        return self.writer.acceptable(f, text, opening, refused)

    def generate(self, class_value: Any, start: int, total: int,
                 on_record: Callable[[dict[str, Any]], None]) -> None:
        """Records ``start .. total - 1`` of the class's stream, each handed to ``on_record``."""
        if start >= total:
            return
        chunk, skip = divmod(start, CHUNK)
        while chunk * CHUNK < total:
            first = chunk * CHUNK
            records = self._chunk(class_value, chunk, range(first, min(first + CHUNK, total)))
            for rec in records[skip:]:
                on_record(rec)
            chunk, skip = chunk + 1, 0

    def _chunk(self, class_value: Any, chunk: int, indices: range) -> list[dict[str, Any]]:
        """One seeded chunk: the model's records with their free texts written by the LLM,
        one text field at a time (each field's few-shot prefix is shared by the chunk); a
        fallback keeps the model's public topic text."""
        drawn = [(i, *self.model.draw(class_value, i)) for i in indices]
        base = chunk_seed(self.seed, self.released.class_index(class_value), chunk)
        examples = self.released.winners.get(class_value, [])[:POSITIVES]
        for f in self.text_fields:
            drafts = [d for i, values, topics in drawn
                      if (d := self._draft(f, class_value, i, values, topics)) is not None]
            self.writer.write(f, class_value, examples, drafts, base)
        return [values for _, values, _ in drawn]

    def _draft(self, f: Field, class_value: Any, index: int, values: dict[str, Any],
               topics: dict[str, int]) -> Draft | None:
        """What the LLM is given to write the record's text for ``f``; None when the record
        keeps its released phrase (`_keeps_released_phrase`). A DP keyword topic's text opens
        with its keywords (`_opening`); an "other" text is `other_draft`'s. Any other draft
        is shown its topic's public texts (`_topic_texts`)."""
        vocab = self._dp_vocabulary(f, topics)
        if vocab is not None and self._keeps_released_phrase(f, vocab, values, topics):
            return None
        if vocab is not None and topics[f.name] == vocab.other:
            return other_draft(index, values, vocab,
                               self._topic_texts(f, values, topics, class_value, index),
                               self._released_terms[f.name])
        opening = self._opening(vocab, values[f.name])
        hints = [] if opening else self._topic_texts(f, values, topics, class_value, index)
        return Draft(index, values, hints, opening)

    def _dp_vocabulary(self, f: Field, topics: dict[str, int]) -> Topics | None:
        """The field's released DP vocabulary when the record has a topic in it, else None."""
        vocab = self.released.topics.get(f.name)
        return vocab if vocab is not None and vocab.source == DP_VOCABULARY and \
            f.name in topics else None

    def _keeps_released_phrase(self, f: Field, vocab: Topics, values: dict[str, Any],
                               topics: dict[str, int]) -> bool:
        """Whether the record keeps the released phrase the model gave it (not "other", and
        the phrase fits the field), the LLM writing nothing for it."""
        if self.paraphrase_phrases or vocab.kind != "phrases":
            return False
        return values[f.name] == topic_text(vocab, topics[f.name], f)

    @staticmethod
    def _opening(vocab: Topics | None, text: str) -> str:
        """A DP keyword topic's text opens with the record's released keyword(s), as the
        model decoder wrote them (``text``), and the LLM writes on: the text keeps what the
        release says of its topic (topic x label, topic x fields). Shown the keyword and left
        to use it, the 270M model did in 15 % of review drafts (three attempts each); shown
        it in the topic line as well, it closed the quote right after it in most. So such a
        draft has no topic line and must go on past its opening. Phrases open with nothing
        ("other" records are `other_draft`'s)."""
        return "" if vocab is None or vocab.kind == "phrases" else text

    def _topic_texts(self, f: Field, values: dict[str, Any], topics: dict[str, int],
                     class_value: Any, index: int) -> list[str]:
        """Public texts of the record's topic for ``f``; without a topic column, a few of
        the schema's example texts (seeded by the record's place in the stream)."""
        if f.name not in topics:
            rng = np.random.default_rng(derive_seed(
                self.seed, "examples", f.name, self.released.class_index(class_value), index))
            return example_hints(f, rng)
        return self.model.topic_hints(f.name, topics[f.name], values[f.name])[:TOPIC_TEXTS]
