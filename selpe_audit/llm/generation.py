"""Schema-constrained record generation with llama.cpp: two stages, several sequences at once.

Per record, Stage I writes a free-text latent context (one line, in the schema's
lexicalization) and Stage II realizes it as one JSON record under the schema's GBNF grammar;
``two_stage=False`` writes the record directly (the ablation). Every record is parsed and
validated; invalid ones are resampled and never returned. The token-level work (shared
prefixes, parallel sequences, sample-then-check grammar sampling) is `engine.BatchEngine`'s.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any

from selpe_audit.errors import UserError
from selpe_audit.llm import prompts
from selpe_audit.llm.config import (
    GenerationConfig,
    GenerationError,
    GenerationStats,
    derive_seed,
)
from selpe_audit.llm.engine import BatchEngine, Request
from selpe_audit.llm.grammar import RecordLayout, max_record_chars, parse_record, record_gbnf
from selpe_audit.llm.models import LLM
from selpe_audit.schema import Schema

# Room for the Stage II wording around the latent context, in tokens.
_SUFFIX_SLACK = 24

__all__ = ["BatchEngine", "GenerationConfig", "GenerationError", "GenerationStats",
           "RecordGenerator", "Request"]


# ----- records -----------------------------------------------------------------------------

class RecordGenerator:
    """Generates schema-valid records for one class at a time from public few-shot examples.

    Not thread-safe; one generator per loaded model at a time (they share its KV cache).
    """

    def __init__(self, schema: Schema, llm: LLM,
                 config: GenerationConfig | None = None) -> None:
        self.schema, self.llm = schema, llm
        self.config = config or GenerationConfig()
        self.stats = GenerationStats()
        self.last_stats = GenerationStats()
        self._validator = schema.record_validator()
        self._calls = 0
        self._record_max_tokens = max_record_chars(schema) + 16

    def _tokens(self, text: str, bos: bool = False) -> list[int]:
        return self.llm.tokenize(text, bos=bos)

    def _prompts(self, class_value: Any, positives: list[dict], negatives: list[dict],
                 hints: Mapping[str, str] | None) -> list[list[int]]:
        """Token lists of the shared prefixes (the last token of a full prompt excluded)."""
        if self.config.two_stage:
            p1 = self._tokens(prompts.stage1_prompt(
                self.schema, class_value=class_value, positives=positives,
                negatives=negatives, hints=hints), bos=True)
            p2 = self._tokens(prompts.stage2_prefix(self.schema, positives=positives), bos=True)
            return [p1, p2]
        p0 = self._tokens(prompts.single_stage_prompt(
            self.schema, class_value=class_value, positives=positives, negatives=negatives,
            hints=hints), bos=True)
        return [p0]

    def _per_sequence_tokens(self) -> int:
        cfg = self.config
        if cfg.two_stage:
            return cfg.context_max_tokens + _SUFFIX_SLACK + self._record_max_tokens
        return 1 + self._record_max_tokens

    def _fit(self, class_value: Any, positives: list[dict], negatives: list[dict],
             hints: Mapping[str, str] | None) -> tuple[list[list[int]], int]:
        """Prompts and parallelism that fit the context: drop negatives, then positives."""
        per_seq = self._per_sequence_tokens()
        n_par = min(self.config.n_parallel, self.llm.n_seq)
        pos, neg = list(positives), list(negatives)
        while True:
            toks = self._prompts(class_value, pos, neg, hints)
            used = sum(len(t) for t in toks)
            if used + n_par * per_seq <= self.llm.n_ctx:
                return toks, n_par
            if neg:
                neg.pop()
            elif len(pos) > 1:
                pos.pop()
            elif n_par > 1:
                n_par -= 1
            else:
                raise UserError(f"the prompt needs {used + per_seq} tokens of context but the "
                                f"model was loaded with n_ctx={self.llm.n_ctx}; raise n_ctx")

    def generate(self, *, class_value: Any, positives: list[dict], negatives: list[dict],
                 hints: dict[str, str] | None = None, n: int,
                 on_record: Callable[[dict], None] | None = None) -> list[dict]:
        """Exactly ``n`` records that validate against the record schema.

        The label is fixed to ``class_value`` in the grammar (unless it is None). Invalid
        outputs are resampled, up to ``max_attempts * n`` attempts in all; ``on_record`` sees
        each record as it is accepted (for incremental writing).
        """
        if n < 0:
            raise ValueError("n must be >= 0")
        if n == 0:
            return []
        schema, cfg, label = self.schema, self.config, self.schema.label
        self._calls += 1
        call = self._calls
        base = cfg.seed if cfg.seed is not None else self.llm.seed
        grammar = record_gbnf(schema, class_value, leading_space=True)
        prefix_tokens, n_par = self._fit(class_value, positives, negatives, hints)
        stats = GenerationStats()
        layout = RecordLayout(schema, class_value)
        engine = BatchEngine(self.llm, cfg, grammar, n_par, stats, layout)
        records: list[dict] = []
        queue: deque[Request] = deque()
        counters = {"attempts": 0, "in_flight": 0}
        first_stage = Request(prefix=0, suffix=prefix_tokens[0][-1:], seed=0,
                              max_tokens=cfg.context_max_tokens, constrained=not cfg.two_stage,
                              stop=b"\n" if cfg.two_stage else b"")
        if not cfg.two_stage:
            first_stage.max_tokens = self._record_max_tokens

        def next_request() -> Request | None:
            if queue:
                return queue.popleft()
            if len(records) + counters["in_flight"] >= n:
                return None
            if counters["attempts"] >= n * cfg.max_attempts:
                return None
            counters["attempts"] += 1
            counters["in_flight"] += 1
            k = counters["attempts"]
            seed = derive_seed(base, call, k, 1)
            return Request(**{**asdict(first_stage), "seed": seed, "tag": k})

        def on_done(req: Request, text: str, complete: bool) -> None:
            if cfg.two_stage and not req.constrained:
                suffix = self._tokens(prompts.stage2_suffix(text))
                seed = derive_seed(base, call, req.tag, 2)
                queue.append(Request(prefix=1, suffix=suffix, seed=seed,
                                     max_tokens=self._record_max_tokens, constrained=True,
                                     tag=req.tag))
                return
            counters["in_flight"] -= 1
            if not complete:
                stats.truncated += 1
            rec = parse_record(text, schema, self._validator) if complete else None
            if rec is not None and class_value is not None and rec[label] != class_value:
                rec = None
            if rec is None:
                stats.invalid += 1
                return
            records.append(rec)
            stats.records += 1
            if on_record is not None:
                on_record(rec)

        t0 = time.perf_counter()
        try:
            # The first prompt's last token is fed per sequence, to get its logits there.
            engine.load_prefixes([prefix_tokens[0][:-1], *prefix_tokens[1:]])
            engine.run(next_request, on_done)
        finally:
            engine.close()
            stats.seconds = time.perf_counter() - t0
            stats.attempts = counters["attempts"]
            self.last_stats = stats
            self.stats.add(stats)
        if len(records) < n:
            raise GenerationError(f"only {len(records)} of {n} records were valid after "
                                  f"{counters['attempts']} attempts; check the prompt examples")
        return records
