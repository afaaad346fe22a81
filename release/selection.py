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

Two alternative round mechanisms replace the per-batch noisy max (``mode``); the loop,
candidates, winners and partners stay the same:

- ``pe-histogram`` (`release.pe_histogram`): every private row votes for its nearest
  candidate; Gaussian noise on the vote histogram; a threshold; the most-voted survive;
- ``representatives`` (`release.representatives`): SecPE's noisy cluster representatives
  vote with their noisy counts.

Both are Gaussian (rho-zCDP per round, mu-GDP), composed by OpenDP's adaptive compositor
in zCDP and converted by OpenDP to (epsilon, delta) at the configured delta; selpe stays
pure epsilon-DP.
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
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from release import pe_histogram, representatives
from release.opendp_mechanisms import (
    CONVERSION_CONSTRUCTOR,
    GAUSSIAN_CONSTRUCTOR,
    approx_dp_of,
    gaussian_compositor,
    gaussian_round,
    gaussian_scale,
    noisy_max_scale,
    noisy_max_with_scale,
    selection_compositor,
    selection_round,
    zcdp_budget,
)
from selpe_audit.kernel.distance import Features, Kernel, NumericScale
from selpe_audit.schema import Schema

if TYPE_CHECKING:  # OpenDP is called from release.opendp_mechanisms only
    import opendp.prelude as dp

CONSTRUCTOR = "opendp.measurements.make_noisy_max (MaxDivergence, non-monotone L-inf)"
MODES = ("selpe", "pe-histogram", "representatives")
GAUSSIAN_MODES = ("pe-histogram", "representatives")


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
    mode: str = "selpe"   # or "pe-histogram", "representatives"
    threshold: float = 1.0  # pe-histogram: votes <= threshold x noise scale are dropped
    anchors: int = 0      # representatives: k-means anchors per class (0: the round's quota)
    radius: float = 0.5   # representatives: clip norm R of a row's offset from its anchor
    dims: int = 16        # representatives: dimensions of the public basis

    def __post_init__(self) -> None:
        if self.rounds < 1 or self.k < 1 or self.batches < 1 or self.q <= 0:
            raise ValueError("selection: rounds, k, batches must be >= 1 and q > 0")
        if self.mode not in MODES:
            raise ValueError(f"selection: unknown mode '{self.mode}'; choose one of "
                             f"{', '.join(MODES)}")
        if not (math.isfinite(self.threshold) and self.threshold >= 0):
            raise ValueError("selection: threshold must be a number >= 0 (noise scales)")
        if self.anchors < 0 or self.dims < 0:
            raise ValueError("selection: anchors and dims must be >= 0")
        if not (math.isfinite(self.radius) and self.radius > 0):
            raise ValueError("selection: radius must be a number > 0")
        if self.schedule is not None:
            if len(self.schedule) != self.rounds or any(s <= 0 for s in self.schedule):
                raise ValueError("selection: schedule needs one positive share per round")
            if not math.isclose(sum(self.schedule), 1.0, abs_tol=1e-9):
                raise ValueError("selection: schedule shares must sum to 1")

    def quota(self, t: int) -> int:
        return math.ceil(t * self.q)

    @property
    def gaussian(self) -> bool:
        return self.mode in GAUSSIAN_MODES

    def shares(self) -> list[float]:
        return list(self.schedule or (1.0 / self.rounds,) * self.rounds)

    def round_epsilons(self, epsilon: float) -> list[float]:
        return [epsilon * s for s in self.shares()]

    def n_anchors(self, quota: int) -> int:
        return self.anchors or quota


@dataclass
class PrivateClasses:
    """Per class: features of the private rows and the privacy-unit ids (in memory only)."""

    priv_features: dict[Any, Features]
    priv_unit_ids: dict[Any, list[str]]

    def __repr__(self) -> str:  # never print private content
        return f"PrivateClasses({len(self.priv_features)} classes)"


@dataclass
class RoundOutput:
    """One round's public outputs and accounting: epsilon for selpe; rho (zCDP) and
    mu (GDP) = sensitivity / scale for the Gaussian modes."""

    round: int
    epsilon: float | None
    scale: float
    quota: int
    classes: list[dict[str, Any]] = field(default_factory=list)
    rho: float | None = None
    mu: float | None = None
    sensitivity: float = 1.0


@dataclass(frozen=True)
class Accounting:
    """The selection's total, from OpenDP's maps: pure epsilon (selpe), or rho-zCDP converted
    to (epsilon, delta) with mu = sqrt(2 rho) the composed GDP parameter."""

    mode: str
    measure: str
    epsilon: float
    delta: float
    rho: float | None = None
    mu: float | None = None
    constructor: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "measure": self.measure, "epsilon": self.epsilon,
                "delta": self.delta, "rho": self.rho, "mu": self.mu,
                "constructor": self.constructor}


@dataclass
class SelectionRun:
    rounds: list[RoundOutput]
    accounting: Accounting


def batch_ids(unit_ids: list[str], key: bytes, b: int) -> np.ndarray:
    """Batch of each unit by a keyed hash of its id: data-independent, fresh key per round,
    and all rows of one person land in the same batch."""
    return np.array([int.from_bytes(hmac.new(key, u.encode(), hashlib.sha256).digest()[:8],
                                    "big") % b for u in unit_ids], dtype=np.int64)


def batch_votes(priv: PrivateClasses, kernel: Kernel,
                pools: dict[Any, tuple[Features, NumericScale]], b: int, epsilon: float,
                noise_scale: float, key: bytes) -> dict[Any, list[int]]:
    """SelPE's private computation in one round: per class, each batch's utilities, then
    one OpenDP noisy max per batch; the winning candidate index of every batch."""
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
    """Algorithm 1 (``cfg.mode`` selpe). Returns every round's winners/partners and OpenDP's
    total epsilon."""
    run = run_selection(schema, priv, kernel, source, cfg, epsilon, 0.0, hints, progress)
    return run.rounds, run.accounting.epsilon


def run_selection(schema: Schema, priv: PrivateClasses, kernel: Kernel,
                  source: CandidateSource, cfg: SelectionConfig, epsilon: float,
                  delta: float = 0.0, hints: dict[Any, dict[str, str]] | None = None,
                  progress: Callable[[str], None] | None = None) -> SelectionRun:
    """The selection loop for every mode: only the round's private mechanism differs.

    ``delta`` is used by the Gaussian modes only (zCDP -> (epsilon, delta)); selpe is pure.
    """
    if cfg.gaussian:
        if not 0 < delta < 1:
            raise ValueError(f"selection mode {cfg.mode} needs 0 < delta < 1")
        budgets = zcdp_budget(epsilon, delta, cfg.shares())
        compositor = gaussian_compositor(budgets)
    else:
        budgets = cfg.round_epsilons(epsilon)
        compositor = selection_compositor(budgets)
    queryable = compositor(priv)
    winners: dict[Any, list[dict]] = {c: [] for c in schema.classes}
    partners: dict[Any, list[dict]] = {c: [] for c in schema.classes}
    rounds: list[RoundOutput] = []
    for t, budget_t in enumerate(budgets, start=1):
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
        measurement, out = round_mechanism(cfg, kernel, pools, t, budget_t)
        ranked = queryable(measurement)  # per class: candidate indices, best first
        for c in schema.classes:
            feats, num_scale = pools[c]
            idx = ranked[c][:m_t]
            far = kernel.pairwise(feats.take(np.array(idx)), feats, num_scale).argmax(axis=1)
            winners[c] = [cand[c][i] for i in idx]
            partners[c] = [cand[c][int(j)] for j in far]
            out.classes.append({"class": c, "winners": winners[c], "partners": partners[c]})
        rounds.append(out)
    return SelectionRun(rounds, _accounting(cfg, compositor, budgets, rounds, delta))


def round_mechanism(cfg: SelectionConfig, kernel: Kernel,
                    pools: dict[Any, tuple[Features, NumericScale]], t: int,
                    budget: float) -> tuple[dp.Measurement, RoundOutput]:
    """Round t's OpenDP measurement (output: per class, candidate indices best first) and
    its accounting. ``budget`` is epsilon_t (selpe) or rho_t (Gaussian modes)."""
    m_t = cfg.quota(t)
    if cfg.mode == "selpe":
        key = secrets.token_bytes(32)
        scale = noisy_max_scale(cfg.k * m_t, budget)  # OpenDP's calibration, once per round
        measurement = selection_round(budget, lambda p: {
            c: _winners(votes, len(votes)) for c, votes in batch_votes(
                p, kernel, pools, cfg.batches, budget, scale, key).items()})
        return measurement, RoundOutput(t, budget, scale, m_t)
    g = gaussian_statistics(cfg, kernel, pools, t)
    scale = gaussian_scale(g.sensitivity, budget)
    measurement = gaussian_round(g.sensitivity, scale, g.vectorize,
                                 lambda noisy: g.rank(noisy, scale))
    if measurement.map(1) > budget:  # OpenDP's map, not ours, decides
        raise RuntimeError("the Gaussian round exceeds its rho")
    # rho: the round's slot in the compositor (what it is charged); mu: the Gaussian's own
    return measurement, RoundOutput(t, None, scale, m_t, rho=budget,
                                    mu=g.sensitivity / scale, sensitivity=g.sensitivity)


@dataclass(frozen=True)
class GaussianStatistics:
    """A Gaussian round before its noise: the private vector (``vectorize``, in which one
    privacy unit moves at most ``sensitivity`` in L2) and the post-processing of its noisy
    version into per-class rankings (``rank(noisy, scale)``)."""

    sensitivity: float
    vectorize: Callable[[PrivateClasses], np.ndarray]
    rank: Callable[[Any, float], dict[Any, list[int]]]


def gaussian_statistics(cfg: SelectionConfig, kernel: Kernel,
                        pools: dict[Any, tuple[Features, NumericScale]],
                        t: int) -> GaussianStatistics:
    """The round's statistics for a Gaussian mode (shared with the mechanism audit)."""
    if cfg.mode == "pe-histogram":
        return GaussianStatistics(
            pe_histogram.SENSITIVITY,
            lambda p: pe_histogram.vote_vector(p, kernel, pools),
            lambda noisy, scale: pe_histogram.rankings(noisy, pools, cfg.threshold * scale))
    if cfg.mode != "representatives":
        raise ValueError(f"selection mode {cfg.mode} is not Gaussian")
    skeletons = {c: representatives.skeleton(
        representatives.flatten(kernel, f, s), cfg.n_anchors(cfg.quota(t)), cfg.dims, seed=t)
        for c, (f, s) in pools.items()}  # public: candidates only
    return GaussianStatistics(
        representatives.sensitivity(cfg.radius),
        lambda p: representatives.stats_vector(p, kernel, pools, skeletons, cfg.radius),
        lambda noisy, _scale: representatives.rankings(noisy, kernel, pools, skeletons))


def _accounting(cfg: SelectionConfig, compositor: dp.Measurement, budgets: list[float],
                rounds: list[RoundOutput], delta: float) -> Accounting:
    if not cfg.gaussian:
        return Accounting(cfg.mode, "pure epsilon-DP (max divergence)",
                          float(compositor.map(1)), 0.0, constructor=CONSTRUCTOR)
    rho = float(compositor.map(1))
    eps, d = approx_dp_of(budgets, delta)
    mu = math.sqrt(sum(r.mu ** 2 for r in rounds if r.mu is not None))
    return Accounting(cfg.mode, "rho-zCDP (Gaussian, mu-GDP), converted to (epsilon, delta)",
                      eps, d, rho=rho, mu=mu,
                      constructor=f"{GAUSSIAN_CONSTRUCTOR}; {CONVERSION_CONSTRUCTOR}")


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


def one_class_per_unit(rows: list[dict[str, Any]], schema: Schema,
                       person_field: str | None) -> list[dict[str, Any]]:
    """SelPE's stable per-person step: keep each person's rows of one class only.

    A person's rows fall in one batch per class (keyed hash of the person id); with rows in
    several classes they would move one batch in each, and the classes would no longer
    compose in parallel. Keeping the class where the person has most rows (ties: schema
    order) depends on that person's rows alone, so one person still moves one batch of one
    class: L-inf distance 1 per round. Row-level units already sit in one class."""
    if not person_field:
        return rows
    order = {c: i for i, c in enumerate(schema.classes)}
    per_person: dict[Any, Counter] = {}
    for r in rows:
        per_person.setdefault(r[person_field], Counter())[r[schema.label]] += 1
    keep = {p: min(c, key=lambda k: (-c[k], order[k])) for p, c in per_person.items()}
    return [r for r in rows if r[schema.label] == keep[r[person_field]]]
