"""Where selection candidates come from: the local LLM, or a public pre-generated pool.

Both read public inputs only (the schema, earlier DP winners and partners, the noisy counts
released earlier in the same run), so generating candidates costs no privacy budget.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from selpe_audit.artifact.model_block import DP_VOCABULARY, Topics
from selpe_audit.artifact.sampling import FieldSampler, draw_topic, topic_text
from selpe_audit.artifact.view import Counts
from selpe_audit.errors import UserError
from selpe_audit.schema import Field, Schema

if TYPE_CHECKING:
    from selpe_audit.llm.models import LLM
    from selpe_audit.models import Models

#: base seeds tried per text field and call (max_attempts each) before the release refuses
TEXT_ROUNDS = 4
_STREAM = 7  # separates the candidates' field draws from the source's other seeded draws
_PUBLIC = 11  # separates the topic codebooks' public records from both


class CandidateSource(Protocol):
    """Makes candidate records from public inputs only (schema, earlier DP winners)."""

    def describe(self) -> dict[str, Any]: ...

    def use_counts(self, counts: Counts) -> None:
        """The counts released earlier in the same run (post-processing: no extra cost)."""

    def generate(self, *, class_value: Any, positives: list[dict], negatives: list[dict],
                 hints: dict[str, str] | None, n: int) -> list[dict]: ...



class PoolSource:
    """Candidates drawn from a public, pre-generated, schema-valid pool (no LLM needed)."""

    def __init__(self, schema: Schema, records: list[dict], sha256: str, seed: int = 0) -> None:
        self.schema = schema
        self.by_class: dict[Any, list[dict]] = {c: [] for c in schema.classes}
        for r in records:
            self.by_class[r[schema.label]].append(r)
        self.sha256 = sha256
        self.rng = np.random.default_rng(seed)  # candidate sampling is public, not DP noise

    def describe(self) -> dict[str, Any]:
        return {"kind": "pool", "sha256": self.sha256,
                "records_per_class": {str(c): len(v) for c, v in self.by_class.items()}}

    def use_counts(self, counts: Counts) -> None:
        """A public pool is used as it is."""

    def generate(self, *, class_value: Any, positives: list[dict], negatives: list[dict],
                 hints: dict[str, str] | None, n: int) -> list[dict]:
        pool = self.by_class[class_value] or [r for v in self.by_class.values() for r in v]
        idx = self.rng.choice(len(pool), size=n, replace=len(pool) < n)
        return [dict(pool[i], **{self.schema.label: class_value}) for i in idx]



class LLMSource:
    """Candidates from the local LLM, in two ways.

    Before the counts are released (the topic codebooks): two-stage, grammar-constrained
    whole records. Once `use_counts` has handed it the run's released counts: each
    candidate's label, categorical and numeric fields are drawn from those counts
    (`FieldSampler`, the rule decode's marginals decoder uses), and the LLM writes only its
    free text as a natural-language completion (`TextWriter`), with the class's earlier DP
    winners as few-shot examples (none in round 1); negatives and hints are not used then.
    With a DP keyword vocabulary, a candidate of a keyword topic has a text that opens with
    the topic's released keyword and the LLM writes on from it (as decode's hybrid decoder
    does), so the selected exemplars are about what the release says the domain writes of;
    an "other" candidate's text may not be a released term (a keyword field's is shown none),
    as in decode.
    A placeholder or out-of-length text is resampled; a text still refused after
    ``max_attempts`` is retried with a fresh base seed, up to `TEXT_ROUNDS` of them; then a
    keyword draft keeps its keyword alone, and any other draft stops the release
    (`UserError`) rather than emit a placeholder.
    """

    def __init__(self, schema: Schema, llm: LLM, seed: int) -> None:
        from selpe_audit.llm import prompts
        from selpe_audit.llm.generation import GenerationConfig, RecordGenerator
        from selpe_audit.llm.text import TextWriter

        self.schema, self.seed = schema, seed
        self.llm = llm
        self.config = GenerationConfig(seed=seed)
        self.generator = RecordGenerator(schema, self.llm, self.config)
        self.writer = TextWriter(schema, self.llm, self.config)
        self.prompts = prompts
        self.fields: FieldSampler | None = None
        self.vocab: dict[str, Topics] = {}
        self._calls = 0  # candidates are public: this seeds sampling, it is not DP noise

    def use_counts(self, counts: Counts) -> None:
        """From now on, fields from the released counts and LLM-written free text only; a
        free-text field with a DP vocabulary released in this run takes its topic from the
        released topic x class counts (post-processing), and a phrase topic's text is the
        phrase itself."""
        self.fields = FieldSampler(self.schema, counts)
        self.vocab = {name: t for name, t in counts.topics.items() if t.source == DP_VOCABULARY}

    def describe(self) -> dict[str, Any]:
        info = self.llm.info
        out: dict[str, Any] = {
            "kind": "llm", "model": {"name": info.name, "sha256": info.sha256},
            "generation": {k: v for k, v in vars(self.config).items() if k != "seed"},
            "prompt_templates": self.prompts.TEMPLATES,
            "prompt_templates_sha256": self.prompts.templates_digest()}
        if self.fields is not None:  # counts only, never text
            s = self.writer.stats
            out["fields_from"] = "the noisy counts released in this run (post-processing)"
            out["text"] = {"written": s.records, "refused": s.invalid,
                           "placeholders": s.placeholders, "copies": s.copies,
                           "retried": s.fallbacks}
        return out

    def public_records(self, class_value: Any, n: int) -> list[dict]:
        """``n`` records of the class from the schema alone, for the topic codebooks (before
        any row is read): fields uniform over the schema's values and ranges, free text
        written by the LLM as `generate` writes it once counts are in, without examples."""
        rng = np.random.default_rng([self.seed, _PUBLIC, self.schema.classes.index(class_value)])
        sampler = FieldSampler(self.schema, None)
        records = [sampler.draw(class_value, rng) for _ in range(n)]
        for f in self.schema.by_kind("text"):
            self._write(f, class_value, [], records, rng)
        return records

    def generate(self, *, class_value: Any, positives: list[dict], negatives: list[dict],
                 hints: dict[str, str] | None, n: int) -> list[dict]:
        if self.fields is None:
            return self.generator.generate(class_value=class_value, positives=positives,
                                           negatives=negatives, hints=hints, n=n)
        self._calls += 1
        rng = np.random.default_rng([self.seed, _STREAM, self._calls])
        records = [self.fields.draw(class_value, rng) for _ in range(n)]
        for f in self.schema.by_kind("text"):
            self._write(f, class_value, positives, records, rng)
        return [{f.name: r[f.name] for f in self.schema.record_fields} for r in records]

    def _write(self, f: Field, class_value: Any, examples: list[dict],
               records: list[dict], rng: np.random.Generator) -> None:
        """Field ``f``'s text of every record, or a `UserError` (see the class)."""
        from selpe_audit.llm.text import (
            TOPIC_TEXTS,
            Draft,
            example_hints,
            other_draft,
            released_terms,
        )

        vocab = self.vocab.get(f.name)
        if vocab is None:
            drafts = [Draft(i, r, example_hints(f, rng)) for i, r in enumerate(records)]
        else:
            drafts, refused = [], released_terms(vocab)
            for i, r in enumerate(records):
                topic = draw_topic(vocab, self.schema.classes.index(class_value), rng)
                term = topic_text(vocab, topic, f)
                if term is not None and vocab.kind == "phrases":
                    r[f.name] = term  # a released phrase, as it was released
                elif term is not None:  # a keyword topic: the text opens with its keyword
                    drafts.append(Draft(i, r, (), opening=term))
                else:  # "other"
                    drafts.append(other_draft(i, r, vocab,
                                              vocab.anchors[topic].members[:TOPIC_TEXTS],
                                              refused))
        for _ in range(TEXT_ROUNDS):
            if not drafts:
                return
            drafts = self.writer.write(f, class_value, examples, drafts,
                                       int(rng.integers(1 << 32)))
        # the LLM never wrote past a keyword opening: the record keeps the keyword alone (a
        # released term, as the hybrid decoder's fallback); any other draft stops the release
        kept = [d for d in drafts if d.opening and self.writer.acceptable(f, d.opening)]
        for d in kept:
            d.values[f.name] = d.opening
        if len(kept) == len(drafts):
            return
        raise UserError(
            f"LLM candidates: the model wrote no acceptable '{f.name}' text for class "
            f"{class_value} in {TEXT_ROUNDS * self.config.max_attempts} attempts (each a "
            "placeholder or outside the length limits); try another --model")


def read_pool(path: Path, schema: Schema) -> PoolSource:
    """A public JSONL pool of schema-valid records (each with the label)."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise UserError(f"{path}: cannot read candidate pool ({e.strerror})") from None
    validator = schema.record_validator()
    records = []
    for i, line in enumerate(data.decode("utf-8", "replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            raise UserError(f"{path}: line {i} is not valid JSON") from None
        err = next(iter(validator.iter_errors(rec)), None)
        if err is not None:
            where = "/".join(map(str, err.absolute_path)) or "record"
            raise UserError(f"{path}: line {i}: '{where}' breaks the schema ({err.validator})")
        records.append(rec)
    if not records:
        raise UserError(f"{path}: the candidate pool is empty")
    return PoolSource(schema, records, hashlib.sha256(data).hexdigest())


def candidate_source(schema: Schema, pool: Path | None, model: str | None, gpu_layers: int,
                     seed: int, models: Models) -> CandidateSource:
    """The public pool if one is configured, else the LLM at ``model`` (from ``models``)."""
    if pool is not None:
        return read_pool(pool, schema)
    return LLMSource(schema, models.llm(model, gpu_layers=gpu_layers), seed)
