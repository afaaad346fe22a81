"""The seeded chunk stream both LLM decoders share (`llm`, `hybrid`).

A class's records come in chunks of `CHUNK`, chunk j seeded by (seed, class, j), so a
resumed decode regenerates the chunk it was in, drops what it already has and continues the
same stream. Apart from the decoders so that `llm` can build `hybrid`'s without a cycle.
"""

from __future__ import annotations

import hashlib

CHUNK = 8          # records per seeded chunk: 2 x the default parallel sequences
POSITIVES = 6      # few-shot winners per prompt (the generator drops some if n_ctx is short)
NEGATIVES = 3      # contrastive partners per prompt


def chunk_seed(seed: int, class_index: int, chunk: int) -> int:
    """A 63-bit seed per (run seed, class, chunk)."""
    digest = hashlib.sha256(f"decode:{seed}:{class_index}:{chunk}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1
