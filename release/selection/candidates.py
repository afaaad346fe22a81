"""Where selection candidates come from: the local LLM, or a public pre-generated pool.

Both read public inputs only (the schema, earlier DP winners and partners, hints derived
from DP counts), so generating candidates costs no privacy budget.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from selpe_audit.errors import UserError
from selpe_audit.schema import Schema


class CandidateSource(Protocol):
    """Makes candidate records from public inputs only (schema, earlier DP winners)."""

    def describe(self) -> dict[str, Any]: ...

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

    def generate(self, *, class_value: Any, positives: list[dict], negatives: list[dict],
                 hints: dict[str, str] | None, n: int) -> list[dict]:
        pool = self.by_class[class_value] or [r for v in self.by_class.values() for r in v]
        idx = self.rng.choice(len(pool), size=n, replace=len(pool) < n)
        return [dict(pool[i], **{self.schema.label: class_value}) for i in idx]



class LLMSource:
    """Two-stage, grammar-constrained generation with the shared core (selpe_audit)."""

    def __init__(self, schema: Schema, model: str | None, gpu_layers: int, seed: int) -> None:
        from selpe_audit.llm import prompts
        from selpe_audit.llm.generation import GenerationConfig, RecordGenerator
        from selpe_audit.llm.models import load_llm

        self.llm = load_llm(model, n_gpu_layers=gpu_layers, seed=seed)
        self.config = GenerationConfig(seed=seed)
        self.generator = RecordGenerator(schema, self.llm, self.config)
        self.prompts = prompts

    def describe(self) -> dict[str, Any]:
        info = self.llm.info
        return {"kind": "llm", "model": {"name": info.name, "sha256": info.sha256},
                "generation": {k: v for k, v in vars(self.config).items() if k != "seed"},
                "prompt_templates": self.prompts.TEMPLATES,
                "prompt_templates_sha256": self.prompts.templates_digest()}

    def generate(self, *, class_value: Any, positives: list[dict], negatives: list[dict],
                 hints: dict[str, str] | None, n: int) -> list[dict]:
        return self.generator.generate(class_value=class_value, positives=positives,
                                       negatives=negatives, hints=hints, n=n)


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
                     seed: int) -> CandidateSource:
    if pool is not None:
        return read_pool(pool, schema)
    return LLMSource(schema, model, gpu_layers, seed)
