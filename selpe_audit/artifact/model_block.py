"""The counts model and topic codebooks of a release.json (``counts.model``, ``counts.topics``).

A model-mode release (``counts.mode`` fixed, aim, mst, or a plugin's) carries every noisy
marginal OpenDP measured, so decode can refit the same Private-PGM model off-site from the
artifact alone, and, per free-text field, the public topic codebook whose topic is a column
of that model.
As in `selpe_audit.artifact.view`, ``parse_*`` reads tolerantly (the review must show any
document) and ``check_*`` refuses a malformed block with a ValueError, which the view turns
into its one-line `UserError`. Every value here is a DP output or public.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field

from selpe_audit.artifact.records import (
    OPEN,
    Name,
    NonNegative,
    Positive,
    Probability,
    parse,
)
from selpe_audit.schema import Schema

#: how decode refits the model from the released marginals, whichever counts mode (its
#: ``algorithm``) chose them
ESTIMATORS = ("mirror_descent",)
COLUMN_KINDS = ("class", "categories", "bins", "topic")
TOPIC_PREFIX = "topic:"
#: ``counts.topics[field].source`` of a DP phrase or keyword vocabulary (`release.phrases`)
DP_VOCABULARY = "dp phrases"


def positive(x: Any) -> bool:
    """A finite number > 0 (a standard deviation), not a bool."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def topic_column(field: str, slot: int = 1) -> str:
    """The model column of a free-text field's topic ("topic:F"), or of its keyword slot
    ``slot`` > 1 ("topic:F#2": a keyword text's second released keyword)."""
    return f"{TOPIC_PREFIX}{field}" + (f"#{slot}" if slot > 1 else "")


@dataclass(frozen=True)
class ModelColumn:
    """One variable of the model. Its model cardinality is ``len(keys) + 1``: OpenDP appends
    a null cell last to every key set, which no true row reaches."""

    __pydantic_config__ = OPEN

    name: str
    field: str
    kind: Literal["class", "categories", "bins", "topic"]
    keys: Annotated[tuple[Any, ...], Field(min_length=1)]
    #: a "bins" column's edges when the release merged adjacent public bins (none: the
    #: schema's own bins)
    edges: tuple[float, ...] | None = None

    @property
    def cells(self) -> int:
        return len(self.keys) + 1


@dataclass(frozen=True)
class ModelMarginal:
    """One released noisy marginal: counts row-major over the clique's cells, nulls included."""

    __pydantic_config__ = OPEN

    clique: tuple[str, ...]
    stddev: Positive
    values: tuple[int | float, ...]


@dataclass(frozen=True)
class CountsModel:
    """``counts.model``: every released marginal, its noise and measure, so decode rebuilds
    the model from it alone."""

    __pydantic_config__ = OPEN

    algorithm: Name
    measure: Literal["zero-concentrated"]
    rho: NonNegative
    columns: Annotated[tuple[ModelColumn, ...], Field(min_length=1)]
    marginals: tuple[ModelMarginal, ...]
    estimator: str | None = None
    total: float | None = None

    def column(self, name: str) -> ModelColumn | None:
        return next((c for c in self.columns if c.name == name), None)


@dataclass(frozen=True)
class TopicAnchor:
    __pydantic_config__ = OPEN

    text: str
    members: tuple[str, ...]  # the anchor's text first
    other: bool | None = None  # a DP vocabulary's "other" topic (every text not released)


@dataclass(frozen=True)
class PhraseCount:
    __pydantic_config__ = OPEN

    text: str
    dp_count: int


@dataclass(frozen=True)
class PhraseInfo:
    """A DP phrase or keyword vocabulary as released (``counts.topics[field].phrases``): its
    terms, largest noisy count first, and the OpenDP mechanism that released them
    (`release.phrases.PhraseVocabulary` is its working form)."""

    __pydantic_config__ = OPEN

    kind: Literal["phrases", "keywords"]
    phrases: tuple[PhraseCount, ...]
    mechanism: str
    epsilon: NonNegative
    delta: Probability
    scale: float
    threshold: int
    per_unit: Annotated[int, Field(ge=1)]
    slots: Annotated[int, Field(ge=1)] = 1
    k: int | None = None  # topics: the phrases and "other"
    normalisation: str | None = None
    other: str | None = None  # what the "other" topic holds, in words
    constructor: str | None = None
    denylist: dict[str, Any] | None = None  # the reviewer's denylist: SHA-256 and size


@dataclass(frozen=True)
class Topics:
    """A free-text field's public codebook: topic j is ``anchors[j]``."""

    __pydantic_config__ = OPEN

    k: Annotated[int, Field(ge=1)]
    source: Literal["public pool", "llm candidates", "dp phrases"]
    anchors: tuple[TopicAnchor, ...]
    embedding_model: str | None = None
    texts_considered: Annotated[int, Field(ge=0)] | None = None
    embeddings: tuple[tuple[float, ...], ...] | None = None  # embedded anchors only
    phrases: PhraseInfo | None = None
    dp_counts_by_class: tuple[tuple[int | float, ...], ...] | None = None  # model modes

    @property
    def by_class(self) -> tuple[tuple[int | float, ...], ...]:
        """Topic x class counts from the fitted model (model modes; else none)."""
        return self.dp_counts_by_class or ()

    @property
    def kind(self) -> str | None:
        """"phrases" or "keywords" for a DP vocabulary (source "dp phrases")."""
        return self.phrases.kind if self.phrases is not None else None

    @property
    def slots(self) -> int:
        """Model columns of the field's topic (a keyword vocabulary: several)."""
        return self.phrases.slots if self.phrases is not None else 1

    @property
    def other(self) -> int | None:
        """A DP vocabulary's "other" topic (its last: every text with no released term);
        None for a codebook of public anchors, whose every topic is a text."""
        return len(self.anchors) - 1 if self.source == DP_VOCABULARY else None

    @property
    def released(self) -> tuple[TopicAnchor, ...]:
        """The topics that are texts: all but "other"."""
        return self.anchors if self.other is None else self.anchors[:self.other]


def parse_model(raw: Any) -> CountsModel | None:
    """``counts.model`` read tolerantly; None when the document has none."""
    return parse(CountsModel, raw)


def parse_topics(raw: Any) -> dict[str, Topics]:
    """``counts.topics`` read tolerantly (empty when absent); a malformed codebook is left
    out."""
    if not isinstance(raw, dict):
        return {}
    return {name: t for name, v in raw.items() if (t := parse(Topics, v)) is not None}


def merged_edges(public: tuple[float, ...], edges: tuple[float, ...] | None) -> bool:
    """Whether ``edges`` (None: the public ones) are public bins merged: a subsequence of
    the public edges, in order, from the first to the last, with at least one bin."""
    if edges is None:
        return True
    return (len(edges) >= 2 and edges[0] == public[0] and edges[-1] == public[-1]
            and all(e in public for e in edges)
            and all(a < b for a, b in itertools.pairwise(edges)))


def check_model_shape(model: CountsModel) -> None:
    """What rebuilding the model needs, without a schema: unique columns, and every marginal
    over known columns with one integer per cell and a positive standard deviation."""
    if not isinstance(model.algorithm, str) or model.estimator not in ESTIMATORS:
        raise ValueError("unknown counts model algorithm or estimator")
    names = [c.name for c in model.columns]
    if not names or len(set(names)) != len(names) or not all(isinstance(n, str) for n in names):
        raise ValueError("counts model columns need unique names")
    cells = {c.name: c.cells for c in model.columns}
    if not model.marginals:
        raise ValueError("the counts model has no marginals")
    for m in model.marginals:
        if len(set(m.clique)) != len(m.clique) or not all(a in cells for a in m.clique):
            raise ValueError("a counts model marginal names unknown columns")
        size = math.prod(cells[a] for a in m.clique)
        if len(m.values) != size or not all(isinstance(v, int) and not isinstance(v, bool)
                                            for v in m.values):
            raise ValueError("a counts model marginal needs one integer per cell")
        if not positive(m.stddev):
            raise ValueError("a counts model marginal needs a positive stddev")
    if not positive(model.total):
        raise ValueError("the counts model needs a positive total")


def check_model(model: CountsModel, schema: Schema, topics: Mapping[str, Topics]) -> None:
    """The shape, and every column's keys equal to the schema's public key set."""
    check_model_shape(model)
    kinds = [c.kind for c in model.columns]
    if kinds.count("class") != 1 or any(k not in COLUMN_KINDS for k in kinds):
        raise ValueError("the counts model needs exactly one class column")
    for c in model.columns:
        f = schema.field(c.field)
        if c.kind == "class":
            ok = f.name == schema.label and c.keys == tuple(str(v) for v in schema.classes)
        elif c.kind == "categories":
            ok = f.kind == "categorical" and c.keys == tuple(str(v) for v in f.enum)
        elif c.kind == "bins":
            ok = f.kind == "numeric" and merged_edges(f.bins, c.edges) and \
                c.keys == tuple(f.bin_labels(c.edges))
        else:
            t = topics.get(f.name)
            ok = (f.kind == "text" and t is not None and
                  c.keys == tuple(str(j) for j in range(len(t.anchors))))
        slots = topics[f.name].slots if c.kind == "topic" and f.name in topics else 1
        names = {topic_column(f.name, s) for s in range(1, slots + 1)} \
            if isinstance(slots, int) else set()
        if not ok or (c.kind != "topic" and c.name != f.name) or \
                (c.kind == "topic" and c.name not in names):
            raise ValueError(f"counts model column '{c.name}' differs from the schema")


def check_topics(topics: Mapping[str, Topics], schema: Schema) -> None:
    """Each codebook belongs to a free-text field and has k anchors of public texts."""
    for name, t in topics.items():
        if schema.field(name).kind != "text":
            raise ValueError(f"topics of '{name}': not a free-text field")
        if not isinstance(t.k, int) or t.k < 1 or len(t.anchors) != t.k:
            raise ValueError(f"topics of '{name}': k and the anchors disagree")
        for a in t.anchors:
            if not isinstance(a.text, str) or not a.members or \
                    not all(isinstance(m, str) for m in a.members):
                raise ValueError(f"topics of '{name}': an anchor needs text and members")
