"""Free text for records whose other fields are given: the LLM writes only the text.

Shared by decode's hybrid decoder (fields from the released model) and the release's LLM
candidates (fields from the counts released earlier in the same run). A small model that
fills a JSON slot copies the schema's own words ("free text", a field name, an enum value);
continuing a natural-language prompt with the fields already written, it writes a text.

Per free-text field and class, the LLM continues a plain-completion prompt
(`prompts.text_prefix` + `prompts.text_suffix`): the class, public exemplars (DP-selected
records) as a few-shot list, the draft's public topic texts (if any) and its fields, then an
opening quote and the draft's *opening* (public words the text starts with, if any: a DP
keyword topic's released keywords); the text ends at the closing quote. A text is kept when
it fits the field's length limits, is not a placeholder (`placeholder_words`,
`only_described_words`), does not echo the fields line (`field_echo`), goes on past its
opening and is none of the draft's *refused* texts (a DP vocabulary's released terms, for a
record of its "other" topic: `released_terms`); otherwise it is resampled with the next
attempt's seed. After ``max_attempts`` the draft is a *fallback*: its value is left
as it was and it is handed back to the caller, who decides what it means (the hybrid decoder
keeps the topic's public text; the release retries with a fresh base seed and refuses after
a cap, so a placeholder is never released).

A small model repeats its few-shot texts word for word (with the bundled 270M model, three
in four attempts did). So the engine never lets a text continue a copy of a text shown in
its prompt (an exemplar's, a topic's or one of the schema's examples) or of a text already
written in the same call past its first `engine.AVOID_SHARED` tokens: texts may start
alike, then they part. A kept text that still equals a shown one (a text of a few tokens) is
counted as a copy. Drafts without topic texts of their own are shown a few of the schema's
example texts (JSON Schema ``examples`` of the field, public), if it has any.

Prompt tokens outnumber the sampled ones several times over, so what drafts share is read
once: the class's few-shot part is a cached prefix, and so is that part followed by the topic
line of each topic two or more drafts show (`TextWriter._topic_prefixes`); a draft's own
part is then only its fields.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from selpe_audit.artifact.model_block import Topics
from selpe_audit.llm import prompts
from selpe_audit.llm.config import GenerationConfig, GenerationStats, derive_seed
from selpe_audit.llm.engine import BatchEngine, Request
from selpe_audit.llm.models import LLM, PREFIX_SEQS
from selpe_audit.schema import Field, Schema

TOPIC_TEXTS = 3  # public topic texts shown in a draft's prompt
_SUFFIX_TOKENS = 160  # a draft's own prompt part: topic texts and fields, in tokens


@dataclass
class TextStats(GenerationStats):
    """Generation counters plus what the text checks refused (no text content)."""

    placeholders: int = 0   # texts refused as a placeholder and resampled
    copies: int = 0         # texts kept that repeat a text shown in their prompt
    fallbacks: int = 0      # drafts handed back unwritten after max_attempts

    def as_dict(self) -> dict[str, float]:
        return {**super().as_dict(), "placeholders": self.placeholders,
                "copies": self.copies, "fallbacks": self.fallbacks}


def plain_words(text: str) -> str:
    """A text as the checks compare it: lower case, runs of anything but letters and digits
    one space."""
    return " ".join(re.sub(r"[^0-9a-z]+", " ", text.lower()).split())


def placeholder_words(schema: Schema) -> frozenset[str]:
    """Texts a small model copies from its prompt instead of writing: field names and
    descriptions, enum values, and "free text" (all compared lower-case, words only)."""
    words = {"free text", "text", "none", "n a", "unknown", "not released"}
    for f in schema.record_fields:
        words |= {plain_words(f.name), plain_words(f.description)}
        words |= {plain_words(str(v)) for v in f.enum or ()}
    return frozenset(w for w in words if w)


def only_described_words(f: Field, text: str) -> bool:
    """Whether ``text`` is two or more words all taken from ``f``'s name and description:
    the small model wrote "film critic's review" for "a film critic's review sentence"."""
    words = plain_words(text).split()
    return len(words) >= 2 and set(words) <= set(plain_words(f"{f.name} {f.description}").split())


def released_terms(vocab: Topics) -> frozenset[str]:
    """A DP vocabulary's released terms (every topic's text but "other"'s), as the checks
    compare texts: no real text of the "other" topic is one of them, so no written one is."""
    return frozenset(plain_words(a.text) for a in vocab.released)


def field_echo(schema: Schema) -> re.Pattern[str]:
    """A text that echoes the prompt's fields line instead of writing: a field's name and a
    colon ("age: 54"), or an identifier joined by underscores ("film_plot", as field names
    are and prose is not)."""
    names = "|".join(re.escape(f.name) for f in schema.record_fields)
    return re.compile(rf"\b(?:{names})\s*:|[a-z0-9]_[a-z0-9]", re.IGNORECASE)


def example_hints(f: Field, rng: np.random.Generator) -> list[str]:
    """Up to `TOPIC_TEXTS` of the schema's public example texts of ``f`` (its JSON Schema
    ``examples``), a different few per draft so that drafts do not all lean on the same."""
    k = min(TOPIC_TEXTS, len(f.examples))
    return [f.examples[int(i)] for i in rng.choice(len(f.examples), size=k, replace=False)]


def _max_tokens(f: Field) -> int:
    """Tokens allowed for one text: about half a token per character of its limit."""
    return max(8, min(96, (f.max_length or 200) // 2))


@dataclass
class Draft:
    """One record whose text for one field is to be written."""

    index: int                          # in the caller's stream: part of each attempt's seed
    values: dict[str, Any]              # its given fields; the text is written into it
    topic_texts: Sequence[str] = ()     # public texts shown in its prompt (up to TOPIC_TEXTS)
    opening: str = ""                   # public words its text starts with (see TextWriter)
    refused: frozenset[str] = frozenset()  # texts it may not be (`plain_words`), see TextWriter


def other_draft(index: int, values: dict[str, Any], vocab: Topics, shown: Sequence[str],
                refused: frozenset[str]) -> Draft:
    """The draft of a record of DP vocabulary ``vocab``'s "other" topic. Its text may not be
    a released term (``refused``: `released_terms`), as no real text of that topic is one. A
    phrase field's draft is ``shown`` texts of the topic, the domain's style; a keyword
    field's is shown none, as its real texts hold none: shown the three commonest, the 270M
    model copied one, so that 53 % of the reviews' texts were "film" (15 % of real reviews
    hold the word)."""
    return Draft(index, values, list(shown) if vocab.kind == "phrases" else [], refused=refused)


class TextWriter:
    """Writes one free-text field of drafts of one class (see module). Not thread-safe: it
    shares the model's KV cache with every other user of ``llm``."""

    def __init__(self, schema: Schema, llm: LLM, config: GenerationConfig) -> None:
        self.schema, self.llm, self.config = schema, llm, config
        self.placeholders = placeholder_words(schema)
        self.echo = field_echo(schema)
        self.stats = TextStats()

    def acceptable(self, f: Field, text: str, opening: str = "",
                   refused: frozenset[str] = frozenset()) -> bool | None:
        """True: keep; False: a placeholder (the schema's own words, or only words of the
        field's description), an echo of the prompt's fields line, no more than its
        ``opening`` (the draft's given first words) or one of its ``refused`` texts; None:
        outside the field's length limits."""
        if not f.min_length <= len(text) <= (f.max_length or len(text)):
            return None
        words = plain_words(text)
        return bool(words) and words not in self.placeholders and \
            not only_described_words(f, text) and not self.echo.search(text) and \
            words != plain_words(opening) and words not in refused

    def write(self, f: Field, class_value: Any, examples: Sequence[dict[str, Any]],
              drafts: Sequence[Draft], base: int) -> list[Draft]:
        """Field ``f``'s text of every draft, attempt a of draft d seeded by (base, d.index,
        f, a); returns the fallbacks (drafts left unwritten), in draft order."""
        stats, cfg = TextStats(), self.config
        shown_texts = [" ".join(str(e[f.name]).split()) for e in examples if e.get(f.name)]
        shown = {plain_words(t) for t in shown_texts}
        tokens = functools.cache(lambda text: tuple(self.llm.tokenize(text)))
        kept: list[str] = []  # texts written in this call: not copied by later drafts
        engine = BatchEngine(self.llm, cfg, None, cfg.n_parallel, stats)
        pending = list(range(len(drafts)))
        attempts = [0] * len(drafts)
        failed: list[int] = []

        def topic_of(d: Draft) -> list[str]:
            return [" ".join(t.split()) for t in list(d.topic_texts)[:TOPIC_TEXTS]]

        def next_request() -> Request | None:
            if not pending:
                return None
            slot = pending.pop(0)
            d = drafts[slot]
            topic = topic_of(d)
            j = prefix_of.get(tuple(topic), 0)  # its topic line is in prefix j (0: none)
            suffix = self.llm.tokenize(
                prompts.text_suffix(self.schema, f, d.values, () if j else topic, d.opening))
            attempts[slot] += 1
            avoid = [tokens(t) for t in dict.fromkeys([*shown_texts, *topic, *kept])]
            return Request(prefix=j, suffix=suffix,
                           seed=derive_seed(base, d.index, f.name, attempts[slot]),
                           max_tokens=_max_tokens(f), constrained=False, stop=b'\n"',
                           tag=slot, avoid=avoid)

        def on_done(req: Request, text: str, complete: bool) -> None:
            slot: int = req.tag
            written = " ".join((drafts[slot].opening + text.split('"')[0]).split())
            ok = self.acceptable(f, written, drafts[slot].opening, drafts[slot].refused)
            if ok:
                drafts[slot].values[f.name] = written
                kept.append(written)
                stats.records += 1
                stats.copies += plain_words(written) in shown | {
                    plain_words(t) for t in topic_of(drafts[slot])}
                return
            stats.invalid += 1
            stats.placeholders += ok is False
            if attempts[slot] < cfg.max_attempts:
                pending.append(slot)
            else:
                stats.fallbacks += 1
                failed.append(slot)

        head = self._prefix(f, class_value, list(examples))
        topic_heads = self._topic_prefixes(f, head, [tuple(topic_of(d)) for d in drafts])
        prefix_of = {t: j + 1 for j, t in enumerate(topic_heads)}
        try:
            engine.load_prefixes([head, *topic_heads.values()])
            engine.run(next_request, on_done)
        finally:
            engine.close()
            stats.attempts = stats.records + stats.invalid
            self.stats.add(stats)
        return [drafts[slot] for slot in sorted(failed)]

    def _topic_prefixes(self, f: Field, head: list[int],
                        topics: Sequence[tuple[str, ...]]) -> dict[tuple[str, ...], list[int]]:
        """Shared prefixes for topics two or more drafts show (the most shown first, as
        many as reserved sequences and the context allow): ``head`` and the topic line.
        Their drafts read the topic line once instead of once per attempt."""
        per_seq = _SUFFIX_TOKENS + _max_tokens(f)
        room = self.llm.n_ctx - len(head) - self.config.n_parallel * per_seq
        out: dict[tuple[str, ...], list[int]] = {}
        for topic, n in Counter(t for t in topics if t).most_common(PREFIX_SEQS - 1):
            line = self.llm.tokenize(prompts.text_topic(f, topic))
            if n < 2 or len(line) > room:
                break
            out[topic], room = head + line, room - len(line)
        return out

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
