"""The LLM decoder on a model-mode artifact: the released model gives every field, the LLM
writes only the free text.

Each record's structured fields and text topics come from the `model` decoder's stream (the
released graphical model, exactly as ``--decoder model`` draws them), so they are as good as
its records and the LLM can never change them: they are fed to the model as the prompt, not
sampled. Per free-text field, the LLM continues a plain-completion prompt (`prompts.text_prefix`
+ `prompts.text_suffix`): the class, the class's DP-selected exemplars as a few-shot list, the
record's topic texts (public anchors) and the record's fields, then an opening quote; the text
ends at the closing quote. A text is kept when it fits the field's length limits and is not a
placeholder (the field's name or description, an enum value, "free text"); otherwise it is
resampled, and after ``max_attempts`` the record keeps the topic's public text (counted).

Resumable stream as the two-stage decoder: chunk j of a class is generated with seeds from
(seed, class, j), its records in index order, so a resumed decode regenerates the chunk it
was in and drops what it already has.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from decode.llm import CHUNK, POSITIVES, chunk_seed
from decode.model import ModelDecoder
from decode.released import Released
from selpe_audit.llm import prompts
from selpe_audit.llm.config import GenerationConfig, GenerationStats
from selpe_audit.llm.engine import BatchEngine, Request
from selpe_audit.llm.generation import _seed
from selpe_audit.llm.models import LLM
from selpe_audit.schema import Field, Schema

TOPIC_TEXTS = 3  # public texts of the record's topic shown in its prompt


@dataclass
class TextStats(GenerationStats):
    """Generation counters plus what the text checks refused (no text content)."""

    placeholders: int = 0   # texts refused as a placeholder and resampled
    fallbacks: int = 0      # texts left to the topic's public text after max_attempts

    def as_dict(self) -> dict[str, float]:
        return {**super().as_dict(), "placeholders": self.placeholders,
                "fallbacks": self.fallbacks}


def _words(text: str) -> str:
    return " ".join(re.sub(r"[^0-9a-z]+", " ", text.lower()).split())


def placeholder_words(schema: Schema) -> frozenset[str]:
    """Texts a small model copies from its prompt instead of writing: field names and
    descriptions, enum values, and "free text" (all compared lower-case, words only)."""
    words = {"free text", "text", "none", "n a", "unknown", "not released"}
    for f in schema.record_fields:
        words |= {_words(f.name), _words(f.description)}
        words |= {_words(str(v)) for v in f.enum or ()}
    return frozenset(w for w in words if w)


@dataclass
class _Record:
    """One record of a chunk while its free texts are being written."""

    index: int                # in the class's stream
    values: dict[str, Any]    # the model's record; its texts are replaced as they are written
    topics: dict[str, int]    # per free-text field with a topic column: the drawn topic
    slot: int = 0             # position in the chunk


class HybridDecoder:
    """Fields from the released model, free text from the LLM (see module)."""

    name = "llm"

    def __init__(self, released: Released, llm: LLM, *, seed: int,
                 config: GenerationConfig | None = None) -> None:
        self.released, self.llm, self.seed = released, llm, seed
        self.config = config or GenerationConfig(seed=seed)
        self.model = ModelDecoder(released, seed)
        self.schema = released.schema
        self.text_fields = list(self.schema.by_kind("text"))
        self.placeholders = placeholder_words(self.schema)
        self.stats = TextStats()
        self.validity = 1.0  # the fields are built valid; texts are checked before use

    def describe(self) -> dict[str, Any]:
        generation = {k: v for k, v in asdict(self.config).items()
                      if k in ("temperature", "top_k", "top_p", "n_parallel", "max_attempts")}
        return {"name": self.name, "fields_from": "the released counts model",
                "counts_model": self.model.describe()["counts_model"],
                "text_fields": [f.name for f in self.text_fields],
                "model": {"name": self.llm.info.name, "sha256": self.llm.info.sha256},
                "generation": generation, "chunk": CHUNK, "positives": POSITIVES,
                "topic_texts": TOPIC_TEXTS, "prompt_templates_sha256": prompts.templates_digest()}

    # --- the text checks ---
    def acceptable(self, f: Field, text: str) -> bool | None:
        """True: keep; False: a placeholder; None: outside the field's length limits."""
        if not f.min_length <= len(text) <= (f.max_length or len(text)):
            return None
        return _words(text) not in self.placeholders and bool(_words(text))

    # --- generation ---
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
        one text field at a time (each field's few-shot prefix is shared by the chunk)."""
        drafts = [_Record(i, *self.model.draw(class_value, i)) for i in indices]
        base = chunk_seed(self.seed, self.released.class_index(class_value), chunk)
        examples = self.released.winners.get(class_value, [])[:POSITIVES]
        for f in self.text_fields:
            self._write(f, class_value, examples, drafts, base)
        return [d.values for d in drafts]

    def _prefix(self, f: Field, class_value: Any,
                examples: list[dict[str, Any]]) -> list[int]:
        """The field's shared prompt, exemplars dropped (last first) until it leaves room for
        every parallel sequence's own part and text."""
        per_seq = _SUFFIX_TOKENS + _max_tokens(f)
        while True:
            tokens = self.llm.tokenize(prompts.text_prefix(
                self.schema, f, class_value=class_value, examples=examples), bos=True)
            if len(tokens) + self.config.n_parallel * per_seq <= self.llm.n_ctx or not examples:
                return tokens
            examples = examples[:-1]

    def _write(self, f: Field, class_value: Any, examples: list[dict[str, Any]],
               drafts: list[_Record], base: int) -> None:
        """Field ``f``'s text of every draft, resampled until acceptable (see module)."""
        stats, cfg = TextStats(), self.config
        engine = BatchEngine(self.llm, cfg, None, cfg.n_parallel, stats)
        pending = list(drafts)
        attempts = dict.fromkeys(range(len(drafts)), 0)

        def next_request() -> Request | None:
            if not pending:
                return None
            d = pending.pop(0)
            topic = (self.model.topic_texts(f.name, d.topics[f.name])[:TOPIC_TEXTS]
                     if f.name in d.topics else [])
            suffix = self.llm.tokenize(prompts.text_suffix(self.schema, f, d.values, topic))
            attempts[d.slot] += 1
            return Request(prefix=0, suffix=suffix,
                           seed=_seed(base, d.index, f.name, attempts[d.slot]),
                           max_tokens=_max_tokens(f), constrained=False, stop_at_newline=True,
                           tag=d)

        def on_done(req: Request, text: str, complete: bool) -> None:
            d: _Record = req.tag
            written = " ".join(text.split('"')[0].split())
            ok = self.acceptable(f, written)
            if ok:
                d.values[f.name] = written
                stats.records += 1
                return
            stats.invalid += 1
            stats.placeholders += ok is False
            if attempts[d.slot] < cfg.max_attempts:
                pending.append(d)
            else:
                stats.fallbacks += 1  # the model's public topic text stays

        for slot, d in enumerate(drafts):
            d.slot = slot
        try:
            engine.load_prefixes([self._prefix(f, class_value, examples)])
            engine.run(next_request, on_done)
        finally:
            engine.close()
            stats.attempts = stats.records + stats.invalid
            self.stats.add(stats)


_SUFFIX_TOKENS = 160  # a record's own prompt part: topic texts and fields, in tokens


def _max_tokens(f: Field) -> int:
    """Tokens allowed for one text: about half a token per character of its limit."""
    return max(8, min(96, (f.max_length or 200) // 2))
