"""SelPE progressive selection (the paper's Algorithm 1), one OpenDP round at a time.

    for t = 1..T:
        m_t = ceil(t q)                                     # the round's quota
        for each class c:
            S_c   = Generate(K m_t | schema, W_c, P_c)      # public inputs only: no cost
            B_c,i = batches of c's private units under a fresh keyed hash, i = 1..b
            u_i(s) = -g(center(B_c,i), s)  in [-1, 0]
            w_c,i = NoisyMax_eps_t(u_i)                     # OpenDP, scale 2 / eps_t
        W_c = the m_t winners most batches chose; P_c = each winner's farthest candidate
    return every round's W_c and P_c

Private features and batch centers exist only inside the round measurement's function and
the `PrivateClasses` object: never written, logged or returned. Batches and classes are
disjoint (parallel composition); rounds compose sequentially through OpenDP's adaptive
compositor, so each round's candidates may depend on earlier winners.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import secrets
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from release.opendp_mechanisms import (
    noisy_max_scale,
    noisy_max_with_scale,
    selection_compositor,
    selection_round,
)
from selpe_audit.kernel import Features, Kernel, NumericScale
from selpe_audit.schema import Schema

CONSTRUCTOR = "opendp.measurements.make_noisy_max (MaxDivergence, non-monotone L-inf)"


class CandidateSource(Protocol):
    """Makes candidate records from public inputs only (schema, earlier DP winners)."""

    def describe(self) -> dict[str, Any]: ...

    def generate(self, *, class_value: Any, positives: list[dict], negatives: list[dict],
                 hints: dict[str, str] | None, n: int) -> list[dict]: ...


@dataclass(frozen=True)
class SelectionConfig:
    rounds: int = 5       # T
    k: int = 3            # K: candidates per quota slot
    batches: int = 5      # b
    q: float = 1.0        # quota growth: m_t = ceil(t q)
    schedule: tuple[float, ...] | None = None  # shares of the selection budget per round

    def __post_init__(self) -> None:
        if self.rounds < 1 or self.k < 1 or self.batches < 1 or self.q <= 0:
            raise ValueError("selection: rounds, k, batches must be >= 1 and q > 0")
        if self.schedule is not None:
            if len(self.schedule) != self.rounds or any(s <= 0 for s in self.schedule):
                raise ValueError("selection: schedule needs one positive share per round")
            if not math.isclose(sum(self.schedule), 1.0, abs_tol=1e-9):
                raise ValueError("selection: schedule shares must sum to 1")

    def quota(self, t: int) -> int:
        return math.ceil(t * self.q)

    def round_epsilons(self, epsilon: float) -> list[float]:
        shares = self.schedule or (1.0 / self.rounds,) * self.rounds
        return [epsilon * s for s in shares]


@dataclass
class PrivateClasses:
    """Per class: features of the private rows and the privacy-unit ids (in memory only)."""

    priv_features: dict[Any, Features]
    priv_unit_ids: dict[Any, list[str]]

    def __repr__(self) -> str:  # never print private content
        return f"PrivateClasses({len(self.priv_features)} classes)"


@dataclass
class RoundOutput:
    round: int
    epsilon: float
    scale: float
    quota: int
    classes: list[dict[str, Any]] = field(default_factory=list)


def batch_ids(unit_ids: list[str], key: bytes, b: int) -> np.ndarray:
    """Batch of each unit by a keyed hash of its id: data-independent, fresh key per round,
    and all rows of one person land in the same batch."""
    return np.array([int.from_bytes(hmac.new(key, u.encode(), hashlib.sha256).digest()[:8],
                                    "big") % b for u in unit_ids], dtype=np.int64)


def _select_round(priv: PrivateClasses, kernel: Kernel, pools: dict[Any, tuple[Features,
                  NumericScale]], b: int, epsilon: float, noise_scale: float,
                  key: bytes) -> dict[Any, list[int]]:
    """The round's private computation: utilities per batch, then OpenDP noisy max each."""
    chosen: dict[Any, list[int]] = {}
    for c, (cand_features, num_scale) in pools.items():
        selector = noisy_max_with_scale(cand_features.n, noise_scale)
        if selector.map(1.0) > epsilon:  # OpenDP's map, not ours, decides
            raise RuntimeError("noisy max scale does not meet the round's epsilon")
        feats = priv.priv_features.get(c)
        if feats is None or feats.n == 0:
            utilities = np.zeros((b, cand_features.n))  # no rows: every batch is uniform
        else:
            centers = kernel.centers(feats, batch_ids(priv.priv_unit_ids[c], key, b), b)
            utilities = -kernel.distances(centers, cand_features, num_scale)
            utilities[centers.empty] = 0.0  # an empty batch selects uniformly at random
        chosen[c] = [int(selector(np.clip(u, -1.0, 0.0).tolist())) for u in utilities]
    return chosen


def _winners(votes: list[int], quota: int) -> list[int]:
    """Post-processing: the quota candidates chosen by most batches (ties: first chosen)."""
    counts = Counter(votes)
    order = sorted(dict.fromkeys(votes), key=lambda i: -counts[i])
    return order[:quota]


def run_selpe(schema: Schema, priv: PrivateClasses, kernel: Kernel, source: CandidateSource,
              cfg: SelectionConfig, epsilon: float,
              hints: dict[Any, dict[str, str]] | None = None,
              progress: Callable[[str], None] | None = None) -> tuple[list[RoundOutput], float]:
    """Algorithm 1. Returns every round's winners/partners and OpenDP's total epsilon."""
    eps_rounds = cfg.round_epsilons(epsilon)
    compositor = selection_compositor(eps_rounds)
    queryable = compositor(priv)
    winners: dict[Any, list[dict]] = {c: [] for c in schema.classes}
    partners: dict[Any, list[dict]] = {c: [] for c in schema.classes}
    rounds: list[RoundOutput] = []
    for t, eps_t in enumerate(eps_rounds, start=1):
        m_t = cfg.quota(t)
        pool_size = cfg.k * m_t
        cand: dict[Any, list[dict]] = {}
        pools: dict[Any, tuple[Features, NumericScale]] = {}
        for c in schema.classes:
            if progress:
                progress(f"round {t}/{cfg.rounds}: {pool_size} candidates for class {c}")
            cand[c] = source.generate(class_value=c, positives=winners[c][-cfg.batches:],
                                      negatives=partners[c][-cfg.batches:],
                                      hints=(hints or {}).get(c), n=pool_size)
            cand_features = kernel.featurize(cand[c])
            pools[c] = (cand_features, kernel.fit_scale(cand_features))
        key = secrets.token_bytes(32)
        scale = noisy_max_scale(pool_size, eps_t)  # OpenDP's calibration, once per round
        measurement = selection_round(
            eps_t, lambda p, pools=pools, key=key, eps=eps_t, scale=scale: _select_round(
                p, kernel, pools, cfg.batches, eps, scale, key))
        chosen = queryable(measurement)
        out = RoundOutput(t, eps_t, scale, m_t)
        for c in schema.classes:
            feats, num_scale = pools[c]
            idx = _winners(chosen[c], m_t)
            far = kernel.pairwise(feats.take(np.array(idx)), feats, num_scale).argmax(axis=1)
            winners[c] = [cand[c][i] for i in idx]
            partners[c] = [cand[c][int(j)] for j in far]
            out.classes.append({"class": c, "winners": winners[c], "partners": partners[c]})
        rounds.append(out)
    return rounds, float(compositor.map(1))


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


def unit_id_of(row: dict[str, Any], schema: Schema, person_field: str | None) -> str:
    """The privacy unit's id: the person id, or (row unit) the row's own content - never its
    position, which would depend on other rows."""
    if person_field:
        return str(row[person_field])
    return json.dumps({f.name: row[f.name] for f in schema.record_fields}, sort_keys=True)
