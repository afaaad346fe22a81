"""Deterministic shards of one decode: which rows each part makes, and the seed of its draws.

The plan (N rows over the classes, `decode.pipeline.plan`) is computed once from the artifact,
so every machine that runs a part agrees on it. Each class's rows are then split over the S
parts by one fixed rule (`split`): every part gets ``rows // S``; the ``rows % S`` rows left
over go to parts k, k + 1, ... (mod S), k the class's index, so that the left-overs of many
small classes spread over the parts instead of all landing on part 0. Part I makes its own
candidates of every class (``overgenerate`` x its rows) and selects and fits them to its own
row targets.

Every draw of part I of S > 1 (the decoders' streams and the fit) is seeded from
`Part.seed`, a hash of (seed, I, S), in place of the run's seed, so a part's records depend
only on (seed, class, part): not on which machine runs it, when, or what ran before. The
whole plan (S = 1) keeps the run's seed, so a decode without shards makes exactly the
records it made before shards existed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Part:
    """Part ``index`` (0-based) of ``count``; ``Part()`` is the whole plan."""

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.count:
            raise ValueError(f"part {self.index} of {self.count} does not exist")

    @property
    def whole(self) -> bool:
        return self.count == 1

    def seed(self, seed: int) -> int:
        """The seed of this part's draws: the run's own for the whole plan, else 63 bits of
        SHA-256 over (seed, index, count)."""
        if self.whole:
            return seed
        digest = hashlib.sha256(f"decode-part:{seed}:{self.index}:{self.count}".encode())
        return int.from_bytes(digest.digest()[:8], "little") >> 1

    def describe(self) -> dict[str, int]:
        return {"index": self.index, "count": self.count}

    @property
    def label(self) -> str:
        return f"shard {self.index} of {self.count}"


WHOLE = Part()


def all_parts(count: int) -> list[Part]:
    return [Part(i, count) for i in range(count)]


def split(rows: int, count: int, offset: int = 0) -> list[int]:
    """``rows`` over ``count`` parts, each within 1 of ``rows / count``; the left-over rows go
    to parts ``offset``, ``offset + 1``, ... (mod ``count``).

    >>> split(10, 3), split(10, 3, offset=1), split(2, 4, offset=3)
    ([4, 3, 3], [3, 4, 3], [1, 0, 0, 1])
    """
    if rows < 0 or count < 1:
        raise ValueError("need rows >= 0 and count >= 1")
    base, left = divmod(rows, count)
    return [base + ((i - offset) % count < left) for i in range(count)]


def part_rows(rows: Mapping[Any, int], part: Part) -> dict[Any, int]:
    """The part's share of every class's rows (classes in plan order: the k-th class's
    left-over rows start at part k)."""
    return {c: split(a, part.count, k % part.count)[part.index]
            for k, (c, a) in enumerate(rows.items())}


def shard_folder(out: Path) -> Path:
    """Where a sharded decode keeps its parts until they are merged into ``out``."""
    return out.with_name(out.name + ".shards")


def shard_path(out: Path, part: Part) -> Path:
    """Part I of S's output (JSONL; its checkpoint and provenance lie beside it)."""
    return shard_folder(out) / f"part-{part.index}-of-{part.count}.jsonl"
