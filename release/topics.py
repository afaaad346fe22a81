"""Free-text topics: a free-text field as a categorical variable for the counts model.

A field's codebook is k anchor texts clustered from PUBLIC texts only (the candidate pool or
LLM candidates, never a private row), so the codebook, its anchors and their embeddings can be
released as they are. Each private text then gets the topic of its nearest anchor (cosine),
computed by a function of that row alone: the text is embedded by the embedder's private
view (a vector that depends on that text only) and compared with the fixed anchors.
Adding or removing one private row therefore changes exactly one row's topic, which is what
the model's sensitivity argument assumes.

The codebook keeps its anchor embeddings exactly as the artifact publishes them (rounded to 5
decimals), so anyone holding the artifact and the same embedder computes the same assignment.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from release.selection.candidates import CandidateSource, PoolSource
from selpe_audit.artifact.model_block import TopicAnchor, Topics
from selpe_audit.artifact.records import adapter, json_form
from selpe_audit.errors import UserError
from selpe_audit.kernel.embeddings import Embedder, PrivateEncoder
from selpe_audit.kernel.private_text import TextEncoder, private_encoder
from selpe_audit.schema import Schema

SOURCE_POOL = "public pool"
SOURCE_LLM = "llm candidates"
MAX_MEMBERS = 5
DECIMALS = 5
N_INIT = 10  # k-means restarts: fixed, so the codebook is a function of its inputs


@dataclass(frozen=True)
class Codebook:
    """One free-text field's public topics: topic j is ``anchors[j]``.

    ``embeddings`` are the anchors' unit embeddings rounded to `DECIMALS` (float64, one row
    per anchor): the very numbers the artifact carries, so assignment is reproducible from it.
    Everything here is public.
    """

    field: str
    source: str
    embedding_model: str
    texts_considered: int
    anchors: tuple[str, ...]
    members: tuple[tuple[str, ...], ...]
    embeddings: np.ndarray

    @property
    def k(self) -> int:
        return len(self.anchors)

    def to_record(self) -> Topics:
        """The artifact's ``counts.topics[field]`` record."""
        return Topics(self.k, self.source, tuple(
            TopicAnchor(a, m) for a, m in zip(self.anchors, self.members, strict=True)),
            embedding_model=self.embedding_model, texts_considered=self.texts_considered,
            embeddings=tuple(tuple(round(float(x), DECIMALS) for x in row)
                             for row in self.embeddings))

    def to_json(self) -> dict[str, Any]:
        return json_form(self.to_record())

    @classmethod
    def from_record(cls, field: str, topics: Topics) -> Codebook:
        """A published codebook (for decode and audits: the same assignment)."""
        if len(topics.anchors) != topics.k or not topics.embedding_model or \
                topics.texts_considered is None or topics.embeddings is None:
            raise ValueError(f"topics of field '{field}': k, anchors and embeddings disagree")
        return cls(field, topics.source, topics.embedding_model, topics.texts_considered,
                   tuple(a.text for a in topics.anchors),
                   tuple(a.members for a in topics.anchors),
                   np.asarray(topics.embeddings, dtype=np.float64))

    @classmethod
    def from_json(cls, field: str, obj: Any) -> Codebook:
        return cls.from_record(field, adapter(Topics).validate_python(obj))

    def __post_init__(self) -> None:
        emb = np.asarray(self.embeddings, dtype=np.float64)
        if emb.ndim != 2 or emb.shape[0] != len(self.anchors) or not self.anchors:
            raise ValueError(f"topics of field '{self.field}': need one embedding per anchor")
        if not np.all(np.isfinite(emb)) or np.any(np.linalg.norm(emb, axis=1) == 0):
            raise ValueError(f"topics of field '{self.field}': anchor embeddings must be "
                             "finite and non-zero")
        emb.flags.writeable = False
        object.__setattr__(self, "embeddings", emb)


# ----- public texts ------------------------------------------------------------------------

def public_topic_texts(source: CandidateSource, schema: Schema,
                       per_class: int) -> dict[str, tuple[list[str], str]]:
    """Public texts of every free-text field, with the source's label.

    A pool gives every text it holds; a generative source (the LLM) writes ``per_class``
    records of each class from the schema alone (`LLMSource.public_records`: no winners, no
    counts), joined by the schema's own example texts, so nothing private can reach the
    codebook.
    """
    fields = [f.name for f in schema.by_kind("text")]
    if isinstance(source, PoolSource):
        records = [r for rs in source.by_class.values() for r in rs]
        label = SOURCE_POOL
    else:
        if per_class < 1:
            raise ValueError("per_class must be at least 1")
        records = [r for c in schema.classes for r in source.public_records(c, per_class)]
        records += [{f.name: t} for f in schema.by_kind("text") for t in f.examples]
        label = SOURCE_LLM
    out: dict[str, tuple[list[str], str]] = {}
    for name in fields:
        texts = (r.get(name) for r in records)
        out[name] = (list(dict.fromkeys(t for t in texts if isinstance(t, str) and t.strip())),
                     label)
    return out


# ----- the codebook ------------------------------------------------------------------------

def build_codebook(field: str, texts: Iterable[str], k: int, embedder: Embedder, seed: int,
                   source_label: str) -> Codebook:
    """Cluster PUBLIC ``texts`` into at most ``k`` topics (k-means on unit embeddings).

    Deterministic for fixed inputs: texts are deduplicated and sorted before embedding, and
    k-means runs with ``random_state=seed`` and a fixed number of restarts. ``k`` shrinks to
    the number of distinct embeddings (texts differing only in case embed alike). Each
    anchor is a real public text (its cluster's text nearest the centroid); topics are
    ordered by cluster size, largest first, then anchor text.
    """
    from sklearn.cluster import KMeans

    if k < 1:
        raise ValueError("k must be at least 1 (0 turns topics off before this point)")
    distinct = sorted({t for t in texts if isinstance(t, str) and t.strip()})
    if not distinct:
        raise UserError(f"topics for text field '{field}': no public texts to build anchors "
                        f"from ({source_label}); give a candidate pool that holds the field, "
                        "or set [counts] topics = 0")
    vecs = np.asarray(embedder.encode(distinct), dtype=np.float64)
    n_points = len(np.unique(vecs, axis=0))
    k_eff = min(k, n_points)
    km = KMeans(n_clusters=k_eff, random_state=seed, n_init=N_INIT).fit(vecs)
    centers = np.asarray(km.cluster_centers_, dtype=np.float64)
    # squared distances to every centroid, without an (n, k, dim) temporary
    dist = ((vecs ** 2).sum(1)[:, None] - 2.0 * vecs @ centers.T
            + (centers ** 2).sum(1)[None, :])
    clusters: list[list[int]] = []  # member indices, nearest to the centroid first
    for j in range(k_eff):
        idx = np.flatnonzero(km.labels_ == j)
        if idx.size:  # k-means leaves none empty on distinct points; never invent one
            # nearest first; ties broken by text order (the texts are sorted)
            clusters.append([int(i) for i in idx[np.lexsort((idx, dist[idx, j]))]])
    clusters.sort(key=lambda c: (-len(c), distinct[c[0]]))
    anchors = tuple(distinct[c[0]] for c in clusters)
    members = tuple(tuple(distinct[i] for i in c[:MAX_MEMBERS]) for c in clusters)
    anchor_vecs = vecs[[c[0] for c in clusters]]
    anchor_vecs /= np.linalg.norm(anchor_vecs, axis=1, keepdims=True)
    return Codebook(field=field, source=source_label, embedding_model=embedder.info.name,
                    texts_considered=len(distinct), anchors=anchors, members=members,
                    embeddings=np.round(anchor_vecs, DECIMALS))


# ----- private assignment ------------------------------------------------------------------

def assign_topics(codebook: Codebook, private_texts: Iterable[str | None],
                  encoder: Embedder | PrivateEncoder | TextEncoder) -> np.ndarray:
    """Topic of each private text: argmax cosine similarity to the anchors, row by row.

    The texts go to the private encoder in one call: its vector for a text is a function of
    that text alone (`PrivateEncoder`), and each row is scored against the fixed anchors on
    its own, so a row's topic is a function of that row only (bit for bit, whatever else is
    assigned). A missing or empty text gets the topic of the empty string. Returns
    ``uint32`` codes in input order. Private out: the codes are private until counted with
    noise.
    """
    enc = private_encoder(encoder)
    anchors = codebook.embeddings / np.linalg.norm(codebook.embeddings, axis=1, keepdims=True)
    texts: list[str] = []
    for t in private_texts:
        if t is not None and not isinstance(t, str):  # never quote the value: it is private
            raise ValueError(f"field '{codebook.field}' holds a value that is not text "
                             f"({type(t).__name__})")
        texts.append(t or "")
    if not texts:
        return np.zeros(0, dtype=np.uint32)
    vecs = np.asarray(enc.encode(texts), dtype=np.float64)
    return np.asarray([int(np.argmax(anchors @ v)) for v in vecs], dtype=np.uint32)
