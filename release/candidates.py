"""Where selection candidates come from: the local LLM, or a public pre-generated pool.

Both read public inputs only (the schema, earlier DP winners and partners, hints derived
from DP counts), so generating candidates costs no privacy budget.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from release.selection import CandidateSource, PoolSource
from selpe_audit.errors import UserError
from selpe_audit.schema import Schema


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
