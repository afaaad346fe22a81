"""SelPE's multi-channel distance kernel g(s, s') between records, with values in [0, 1].

Channels (names as they appear in configs and in the artifact):

- ``field:<name>`` for every record field: the embedding of l(c, v) (``Schema.lexicalize``),
  a unit vector; channel distance (1 - cos) / 2, clipped to [0, 1];
- ``global``: the whole record, as the normalised sum of its fields' vectors (every field
  but the label), same distance. Not the embedding of the linearised record: that text is
  distinct in every row, so a million private rows meant a million 128-token encodes
  (~50 ms each on 2 cores); the sum costs one encode per distinct field value;
- ``num:<name>`` for every numeric field: |x - y| / scale, clipped to [0, 1]. The robust scale
  comes from the candidate set only (IQR times a multiple, floored and capped by the field's
  public range from the schema), never from private data.

g is the weighted sum of channel distances with weights >= 0 that sum to 1, clipped to [0, 1].
So the selection utility u_i(s) = -g(center_i, s) lies in [-1, 0] and adding or removing one
private record moves every score by at most 1, whatever the batch holds (sensitivity 1).

Privacy role: this module is public code. What flows through it is not always public:
`Features` of private records and every `Centers` object are private. They must never be
written, logged, pickled into an artifact or returned outside the release stage; only the
DP selection that consumes the distances may leave. Candidate features, the `NumericScale`
fitted on them, and the kernel configuration are public. The reprs below print shapes and
channel names only, so an accidental log line carries no values.

About 440 lines on purpose: channels, features (public and per-row private), centers, the
numeric scale and the kernel
carry one privacy argument (every channel in [0, 1], weights summing to 1), read best whole.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from selpe_audit.kernel.private_text import TextEncoder, private_encoder
from selpe_audit.schema import Schema

#: records as the kernel reads them: dicts (candidates), or a frame typed by the schema (the
#: release's private rows, read by column; no dict per row)
Records = Sequence[Mapping[str, Any]] | pl.DataFrame


def _column(records: Records, name: str) -> list[Any]:
    """One field's values in record order (KeyError if the records lack it)."""
    if isinstance(records, pl.DataFrame):
        if name not in records.columns:
            raise KeyError(name)
        return records[name].to_list()
    return [r[name] for r in records]

GLOBAL = "global"
FIELD_PREFIX = "field:"
NUM_PREFIX = "num:"
#: Named channel sets (ablations); "full" is the default.
CHANNEL_SETS: dict[str, tuple[str, ...]] = {
    "full": ("field", "global", "num"),
    "fields": ("field",),
    "global": ("global",),
    "numeric": ("num",),
    "fields+global": ("field", "global"),
    "global+numeric": ("global", "num"),
}
#: Distance given to every candidate for an empty batch: a constant row, so noisy max over it
#: selects uniformly at random, as the design asks.
EMPTY_BATCH_DISTANCE = 1.0
_WEIGHT_SUM_TOL = 1e-6
_NORM_TOL = 1e-3
_DEGENERATE_NORM = 1e-12


def channel_kind(name: str) -> str:
    """``field``, ``global`` or ``num``; `ValueError` for a malformed channel name."""
    if name == GLOBAL:
        return "global"
    for prefix in (FIELD_PREFIX, NUM_PREFIX):
        if name.startswith(prefix) and len(name) > len(prefix):
            return prefix[:-1]
    raise ValueError(f"unknown kernel channel '{name}': channels are 'global', "
                     "'field:<field name>' and 'num:<numeric field name>'")


def available_channels(schema: Schema) -> list[str]:
    """Every channel the schema supports, in canonical order (fields, global, numerics).

    The label has no field channel: records are compared within one class, where the label
    is constant and its channel would only dilute the others.
    """
    return ([FIELD_PREFIX + f.name for f in schema.record_fields if f.name != schema.label]
            + [GLOBAL]
            + [NUM_PREFIX + f.name for f in schema.by_kind("numeric")])


@dataclass(frozen=True)
class KernelConfig:
    """Channel weights (public; recorded in the artifact).

    Give either ``weights`` (channel -> weight; absent channels weigh 0) or ``channels``, a
    named set from `CHANNEL_SETS` weighted equally; neither means equal weights over all
    channels. The numeric scale of a channel is ``clip(scale_iqr_multiple * IQR(candidates),
    scale_floor * range, range)`` with ``range`` the field's public ``maximum - minimum``.
    """

    weights: dict[str, float] | None = None
    channels: str | None = None
    scale_iqr_multiple: float = 2.0
    scale_floor: float = 0.05

    def __post_init__(self) -> None:
        if self.weights is not None and self.channels is not None:
            raise ValueError("give kernel weights or a named channel set, not both")
        if self.channels is not None and self.channels not in CHANNEL_SETS:
            raise ValueError(f"unknown kernel channel set '{self.channels}'; "
                             f"choose one of {sorted(CHANNEL_SETS)}")
        if not (math.isfinite(self.scale_iqr_multiple) and self.scale_iqr_multiple > 0):
            raise ValueError("scale_iqr_multiple must be a positive number")
        if not (math.isfinite(self.scale_floor) and 0 < self.scale_floor <= 1):
            raise ValueError("scale_floor must lie in (0, 1] (a fraction of the public range)")
        if self.weights is None:
            return
        if not self.weights:
            raise ValueError("kernel weights are empty: give at least one channel")
        clean: dict[str, float] = {}
        for name, w in self.weights.items():
            if not isinstance(name, str):
                raise ValueError(f"kernel channel names must be strings, got {name!r}")
            channel_kind(name)
            if isinstance(w, bool) or not isinstance(w, numbers.Real) or not math.isfinite(w):
                raise ValueError(f"kernel weight of channel '{name}' must be a finite number")
            if w < 0:
                raise ValueError(f"kernel weight of channel '{name}' must be >= 0, got {w}")
            clean[name] = float(w)
        total = math.fsum(clean.values())
        if abs(total - 1.0) > _WEIGHT_SUM_TOL:
            raise ValueError(f"kernel weights must sum to 1, got {total:.9g} "
                             f"over channels {sorted(clean)}")
        object.__setattr__(self, "weights", clean)  # a private copy the caller cannot mutate

    def resolve(self, schema: Schema) -> dict[str, float]:
        """Channel -> weight for ``schema``: positive weights only, canonical order, sum 1."""
        available = available_channels(schema)
        if self.weights is None:
            kinds = CHANNEL_SETS[self.channels or "full"]
            names = [c for c in available if channel_kind(c) in kinds]
            if not names:
                raise ValueError(f"kernel channel set '{self.channels}' has no channel "
                                 f"in schema '{schema.name}'")
            return {c: 1.0 / len(names) for c in names}
        unknown = [c for c in self.weights if c not in available]
        if unknown:
            raise ValueError(f"unknown kernel channel '{unknown[0]}' for schema "
                             f"'{schema.name}'; available: {available}")
        positive = {c: self.weights[c] for c in available if self.weights.get(c, 0.0) > 0}
        total = math.fsum(positive.values())
        return {c: w / total for c, w in positive.items()}

    def channel_names(self, schema: Schema) -> list[str]:
        """The channels that carry weight for ``schema``, in canonical order."""
        return list(self.resolve(schema))


def _readonly(a: np.ndarray) -> np.ndarray:
    """A read-only view: features are shared between calls, and the caller's array stays
    writeable."""
    v = a.view()
    v.flags.writeable = False
    return v


def _unit_sum(parts: Sequence[np.ndarray]) -> np.ndarray:
    """Row-wise sum of unit vectors, normalised in float64 (a zero sum stays zero): the
    ``global`` channel, a function of each row's own field vectors."""
    total = np.zeros(parts[0].shape, dtype=np.float64)
    for p in parts:
        total += p
    norms = np.linalg.norm(total, axis=1, keepdims=True)
    return (total / np.where(norms > _DEGENERATE_NORM, norms, 1.0)).astype(np.float32)


@dataclass(frozen=True, repr=False)
class Features:
    """Per-channel features of ``n`` records: unit (or zero) float32 rows ``(n, d)`` for
    semantic channels, float64 values ``(n,)`` for numeric channels.

    Private when computed from private records: never write, log or return them outside the
    release stage.
    """

    n: int
    semantic: Mapping[str, np.ndarray] = field(default_factory=dict)
    numeric: Mapping[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.n < 0:
            raise ValueError("Features.n must be non-negative")
        sem: dict[str, np.ndarray] = {}
        for name, x in self.semantic.items():
            if channel_kind(name) == "num":
                raise ValueError(f"channel '{name}' is numeric, not semantic")
            a = np.ascontiguousarray(x, dtype=np.float32)
            if a.ndim != 2 or a.shape[0] != self.n:
                raise ValueError(f"channel '{name}': expected shape ({self.n}, d), got {a.shape}")
            if not np.all(np.isfinite(a)):
                raise ValueError(f"channel '{name}': embeddings must be finite")
            if a.size and np.max(np.einsum("ij,ij->i", a, a)) > 1.0 + _NORM_TOL:
                raise ValueError(f"channel '{name}': embeddings must be unit (or zero) vectors")
            sem[name] = _readonly(a)
        num: dict[str, np.ndarray] = {}
        for name, x in self.numeric.items():
            if channel_kind(name) != "num":
                raise ValueError(f"channel '{name}' is semantic, not numeric")
            a = np.array(x, dtype=np.float64)
            if a.shape != (self.n,):
                raise ValueError(f"channel '{name}': expected shape ({self.n},), got {a.shape}")
            if not np.all(np.isfinite(a)):
                raise ValueError(f"channel '{name}': values must be finite")
            num[name] = _readonly(a)
        object.__setattr__(self, "semantic", sem)
        object.__setattr__(self, "numeric", num)

    @property
    def channels(self) -> list[str]:
        return [*self.semantic, *self.numeric]

    def take(self, index: np.ndarray | Sequence[int]) -> Features:
        """The features of a subset of rows (e.g. the winners among the candidates)."""
        idx = np.asarray(index, dtype=np.intp)
        return Features(n=len(idx), semantic={k: v[idx] for k, v in self.semantic.items()},
                        numeric={k: v[idx] for k, v in self.numeric.items()})

    def __repr__(self) -> str:
        return f"Features(n={self.n}, channels={self.channels})"


@dataclass(frozen=True, repr=False)
class Centers:
    """Batch centers (``features`` has one row per batch) and the mask of empty batches.

    Always private: never write, log or return them outside the release stage.
    """

    features: Features
    empty: np.ndarray

    def __post_init__(self) -> None:
        empty = np.asarray(self.empty)
        if empty.dtype != np.bool_ or empty.shape != (self.features.n,):
            raise ValueError(f"Centers.empty must be a boolean array of shape ({self.b},)")
        object.__setattr__(self, "empty", _readonly(empty))

    @property
    def b(self) -> int:
        return self.features.n

    def __repr__(self) -> str:
        return f"Centers(b={self.b}, channels={self.features.channels})"


@dataclass(frozen=True)
class NumericScale:
    """Per numeric channel, the positive scale that maps |x - y| onto [0, 1]. Public: it is
    computed from candidates (public) and the schema's public ranges only."""

    scales: dict[str, float]

    def __post_init__(self) -> None:
        for name, s in self.scales.items():
            if channel_kind(name) != "num":
                raise ValueError(f"channel '{name}' is not numeric and takes no scale")
            if not (math.isfinite(s) and s > 0):
                raise ValueError(f"scale of channel '{name}' must be a positive number")

    def to_json(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.scales.items()}


class Kernel:
    """The distance g over the channels of a `KernelConfig` for one schema.

    Public code; see the module docstring for which of its inputs and outputs are private.
    """

    def __init__(self, schema: Schema, embedder: TextEncoder | None = None,
                 config: KernelConfig | None = None) -> None:
        self.schema = schema
        self.config = config or KernelConfig()
        self.weights = self.config.resolve(schema)
        self.semantic_channels = [c for c in self.weights if channel_kind(c) != "num"]
        self.numeric_channels = [c for c in self.weights if channel_kind(c) == "num"]
        self.embedder = embedder  # only `featurize` needs it; distances work on features

    @property
    def channels(self) -> list[str]:
        return list(self.weights)

    def to_json(self) -> dict[str, Any]:
        """The public kernel description for the artifact's selection config."""
        out: dict[str, Any] = {
            "channels": self.channels,
            "weights": dict(self.weights),
            "semantic_distance": "(1 - cos) / 2, clipped to [0, 1]",
            **({"global": "the normalised sum of the record's field vectors (every field "
                          "but the label)"} if GLOBAL in self.weights else {}),
            "numeric_distance": "|x - y| / scale, clipped to [0, 1]",
            "numeric_scale": {"statistic": "IQR of the round's candidates",
                              "multiple": self.config.scale_iqr_multiple,
                              "floor_fraction_of_public_range": self.config.scale_floor,
                              "ceiling": "public range"},
        }
        info = getattr(self.embedder, "info", None)
        if info is not None and self.semantic_channels:
            out["embedder"] = info.to_json()
        return out

    # ----- features --------------------------------------------------------------------
    def featurize(self, records: Sequence[Mapping[str, Any]]) -> Features:
        """Every channel of PUBLIC ``records`` (candidates, synthetic rows): all texts in one
        batched encoder call. Private rows go through `featurize_private`."""
        return self._featurize(records, self.embedder)

    def featurize_private(self, priv_records: Records) -> Features:
        """Every channel of private rows, each row's features a function of that row alone:
        texts are encoded by the embedder's private view (each vector from its text alone;
        its own cache, never the candidates'). Private out."""
        return self._featurize(priv_records, private_encoder(self.embedder))

    def _featurize(self, records: Records, encoder: TextEncoder | None) -> Features:
        n = len(records)
        numeric: dict[str, np.ndarray] = {}
        for ch in self.numeric_channels:
            name = ch[len(NUM_PREFIX):]
            try:
                numeric[ch] = np.array([float(v) for v in _column(records, name)],
                                       dtype=np.float64)
            except KeyError:
                raise ValueError(f"a record lacks the field '{name}'") from None
            except (TypeError, ValueError):  # the message would quote the value: drop it
                raise ValueError(f"field '{name}' holds a value that is not a number") from None
        if self.semantic_channels and encoder is None:
            raise ValueError(f"kernel channels {self.semantic_channels} need an embedder")
        semantic: dict[str, np.ndarray] = {}
        if self.semantic_channels:
            assert encoder is not None
            vecs = self._field_vectors(records, encoder)
            for ch in self.semantic_channels:
                if ch == GLOBAL:
                    semantic[ch] = _unit_sum(list(vecs.values()))
                else:
                    semantic[ch] = vecs[ch[len(FIELD_PREFIX):]]
        return Features(n=n, semantic=semantic, numeric=numeric)

    def _field_vectors(self, records: Records, encoder: TextEncoder) -> dict[str, np.ndarray]:
        """The vector of l(c, v) for every record and every field a semantic channel needs
        (all fields but the label for ``global``, the label where it is the only field):
        each distinct value of a field is lexicalised and encoded once, in one encoder call
        (values repeat across rows)."""
        names = ([f.name for f in self.schema.record_fields if f.name != self.schema.label]
                 or [self.schema.label] if GLOBAL in self.semantic_channels else
                 [ch[len(FIELD_PREFIX):] for ch in self.semantic_channels])
        texts: list[str] = []
        rows_of: dict[str, np.ndarray] = {}
        for name in names:
            where: dict[tuple[type, Any], int] = {}  # (type, value): 1 and 1.0 print apart
            try:
                idx = [where.setdefault((type(v), v), len(where))
                       for v in _column(records, name)]
                distinct = [v for _, v in where]
                first = len(texts)
                texts.extend(self.schema.lexicalize(name, v) for v in distinct)
            except KeyError:  # the key is a field name, but say only what is public for sure
                raise ValueError(f"channel for field '{name}': a record lacks it") from None
            except (TypeError, ValueError):
                raise ValueError(f"field '{name}': a record value cannot be "
                                 "lexicalised") from None
            rows_of[name] = first + np.asarray(idx, dtype=np.int64)
        vecs = np.asarray(encoder.encode(texts), dtype=np.float32)
        return {name: vecs[rows].reshape(len(records), -1) for name, rows in rows_of.items()}

    def fit_scale(self, cand_features: Features) -> NumericScale:
        """Robust per-channel scales from the CANDIDATES only (public). Never pass features
        of private records: the scale is published and sets every private score."""
        self._check(cand_features, self.numeric_channels)
        scales: dict[str, float] = {}
        mult, floor = self.config.scale_iqr_multiple, self.config.scale_floor
        for ch in self.numeric_channels:
            f = self.schema.field(ch[len(NUM_PREFIX):])
            assert f.minimum is not None and f.maximum is not None
            public_range = float(f.maximum) - float(f.minimum)
            x = cand_features.numeric[ch]
            iqr = float(np.subtract(*np.percentile(x, [75, 25]))) if x.size >= 2 else 0.0
            scales[ch] = min(max(mult * iqr, floor * public_range), public_range)
        return NumericScale(scales)

    # ----- centers and distances -------------------------------------------------------
    def centers(self, features: Features, batch_ids: np.ndarray, b: int) -> Centers:
        """Per batch i in [0, b): the normalised mean direction of each semantic channel and
        the mean of each numeric channel, plus the mask of empty batches (zero rows there;
        `distances` gives them a constant row). Private in, private out."""
        self._check(features, self.channels)
        if isinstance(b, bool) or not isinstance(b, int | np.integer) or b < 1:
            raise ValueError("the number of batches b must be a positive integer")
        ids = np.asarray(batch_ids)
        if ids.ndim != 1 or ids.shape[0] != features.n:
            raise ValueError(f"batch_ids must have shape ({features.n},), got {ids.shape}")
        if ids.size and (not np.issubdtype(ids.dtype, np.integer)
                         or ids.min() < 0 or ids.max() >= b):
            raise ValueError(f"batch_ids must be integers in [0, {b})")
        ids = ids.astype(np.intp, copy=False)
        counts = np.bincount(ids, minlength=b)
        # Group rows by batch once; np.add.reduceat then sums each non-empty batch's block.
        order = np.argsort(ids, kind="stable")
        filled = counts > 0
        starts = (np.cumsum(counts) - counts)[filled]
        semantic: dict[str, np.ndarray] = {}
        for ch in self.semantic_channels:
            x = features.semantic[ch]
            sums = np.zeros((b, x.shape[1]), dtype=np.float64)
            if starts.size:
                sums[filled] = np.add.reduceat(x[order], starts, axis=0, dtype=np.float64)
            norms = np.linalg.norm(sums, axis=1, keepdims=True)
            unit = np.divide(sums, norms, out=np.zeros_like(sums), where=norms > _DEGENERATE_NORM)
            semantic[ch] = unit.astype(np.float32)
        numeric: dict[str, np.ndarray] = {}
        for ch in self.numeric_channels:
            sums = np.bincount(ids, weights=features.numeric[ch], minlength=b)
            numeric[ch] = np.divide(sums, counts, out=np.zeros(b), where=counts > 0)
        return Centers(Features(n=b, semantic=semantic, numeric=numeric), counts == 0)

    def distances(self, centers: Centers, cand_features: Features,
                  scale: NumericScale | None) -> np.ndarray:
        """g(center_i, s_j) for all b x M pairs in one vectorised pass; rows of empty batches
        are the constant `EMPTY_BATCH_DISTANCE`. The result is private until the DP
        selection consumes it."""
        d = self.pairwise(centers.features, cand_features, scale)
        d[centers.empty] = EMPTY_BATCH_DISTANCE
        return d

    def pairwise(self, a: Features, b: Features, scale: NumericScale | None) -> np.ndarray:
        """g(a_i, b_j) as an ``(a.n, b.n)`` float64 array in [0, 1] (contrastive partners:
        the farthest candidate; decode's SelectTop: the nearest to the winners' center)."""
        self._check(a, self.channels)
        self._check(b, self.channels)
        out = np.zeros((a.n, b.n), dtype=np.float64)
        for ch in self.semantic_channels:
            xa, xb = a.semantic[ch], b.semantic[ch]
            if xa.shape[1] != xb.shape[1]:
                raise ValueError(f"channel '{ch}': embedding sizes differ "
                                 f"({xa.shape[1]} vs {xb.shape[1]})")
            dist = (1.0 - (xa @ xb.T).astype(np.float64)) * 0.5
            out += self.weights[ch] * np.clip(dist, 0.0, 1.0, out=dist)
        for ch in self.numeric_channels:
            if scale is None or ch not in scale.scales:
                raise ValueError(f"no numeric scale for channel '{ch}' (call fit_scale "
                                 "on the candidates)")
            dist = np.abs(a.numeric[ch][:, None] - b.numeric[ch][None, :])
            dist /= scale.scales[ch]
            out += self.weights[ch] * np.clip(dist, 0.0, 1.0, out=dist)
        return np.clip(out, 0.0, 1.0, out=out)

    def _check(self, features: Features, channels: Sequence[str]) -> None:
        for ch in channels:
            have = features.numeric if channel_kind(ch) == "num" else features.semantic
            if ch not in have:
                raise ValueError(f"features lack the kernel channel '{ch}'")
