"""How records are sampled (`GenerationConfig`) and what a run counted (`GenerationStats`).

Shared by the batch engine and the record generator; frozen and checked on construction so
provenance can record a config as is. Counters hold no record content.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Any

from selpe_audit.errors import UserError


class GenerationError(RuntimeError):
    """Generation could not produce the requested records within its attempt budget."""


@dataclass(frozen=True)
class GenerationConfig:
    """How records are sampled; frozen and checked so provenance can record it as is."""

    two_stage: bool = True
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    context_max_tokens: int = 96
    n_parallel: int = 4
    seed: int | None = None
    max_attempts: int = 3
    fast_forward: bool = True

    def __post_init__(self) -> None:
        checks = [
            (self.temperature >= 0, "temperature must be >= 0"),
            (self.top_k >= 0, "top_k must be >= 0 (0 = off)"),
            (0 < self.top_p <= 1, "top_p must be in (0, 1]"),
            (self.context_max_tokens >= 8, "context_max_tokens must be >= 8"),
            (self.n_parallel >= 1, "n_parallel must be >= 1"),
            (self.max_attempts >= 1, "max_attempts must be >= 1"),
        ]
        for ok, msg in checks:
            if not ok:
                raise UserError(f"generation config: {msg}")


@dataclass
class GenerationStats:
    """Counters of one or more generate() calls (all public: no record content)."""

    records: int = 0
    attempts: int = 0
    invalid: int = 0
    truncated: int = 0
    context_tokens: int = 0
    record_tokens: int = 0
    forced_tokens: int = 0
    prompt_tokens: int = 0
    rejections: int = 0
    full_masks: int = 0
    seconds: float = 0.0

    @property
    def tokens(self) -> int:
        """Sampled tokens (forced tokens are fed, not sampled, and counted apart)."""
        return self.context_tokens + self.record_tokens

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    @property
    def validity(self) -> float:
        """Share of finished records that validated (the rest were resampled)."""
        done = self.records + self.invalid
        return self.records / done if done else 1.0

    def add(self, other: GenerationStats) -> None:
        for k, v in asdict(other).items():
            setattr(self, k, getattr(self, k) + v)

    def as_dict(self) -> dict[str, float]:
        out: dict[str, float] = dict(asdict(self))
        out.update(tokens=self.tokens, tokens_per_s=self.tokens_per_s,
                   records_per_s=self.records_per_s, validity=self.validity,
                   rejection_rate=self.rejections / self.record_tokens if self.record_tokens
                   else 0.0)
        return out


def derive_seed(*parts: Any) -> int:
    """A 32-bit seed derived from a base seed and where we are (call, record, attempt, stage):
    the same place always gets the same seed, whatever ran before it."""
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "little")
