"""SelPE's round (``--selection selpe``, the default): per-batch noisy max, pure epsilon-DP.

Per class, the private units are split into b disjoint batches by a keyed hash of the unit
id with a fresh key per round. Batch center = per-channel mean; utility of candidate s for
batch i: u_i(s) = -g(center_i, s), clipped to [-1, 0], so one unit moves one batch's score
vector by at most 1 in L-inf (not monotone). OpenDP's report-noisy-max at the scale its map
needs for epsilon_t (2 / epsilon_t) picks one candidate per batch; an empty batch picks
uniformly. Batches and classes are disjoint: parallel composition. The candidates most
batches chose win.

Utilities (``[selection] utility``): "minmax" (default) rescales each batch's vector to span
[-1, 0], u'(s) = (u(s) - max u) / (max u - min u), all zeros when every candidate scores the
same; "raw" keeps -g. Raw scores of a round's candidates differ by a few hundredths, which
noise at scale 2 / epsilon_t drowns; rescaled, the best and worst candidate are 1 apart.
Sensitivity is unchanged: the rescale is computed from the batch's own rows and the public
candidates only (one unit still moves one batch's vector), and its output still lies in
[-1, 0]^M, where any two vectors differ by at most 1 in L-inf, whatever the input. That
bound (not monotone) is all OpenDP's noisy max uses, so the noise scale and the map are the
same in both modes. The rescale runs inside the batch's stable transformation, before the
noisy max, i.e. inside the OpenDP chain.

The round enforces its own sensitivity: as an OpenDP chain it first applies the
one-class-per-unit rule (a stable transformation into `OneClassPerUnit`, the only input
the batch utilities accept), then per (class, batch) a stable transformation to the
batch's utilities and OpenDP's ``then_noisy_max``, composed in parallel
(`release.dp.noisy_max.make_parallel_batches`). Its epsilon is OpenDP's map of the chain.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from release.config_sections import SelectionConfig
from release.dp.noisy_max import (
    NOISY_MAX_CONSTRUCTOR,
    calibrate_noisy_max_scale,
    make_batch_selector,
    make_one_class_per_unit,
    make_parallel_batches,
)
from release.selection.registry import register
from release.selection.types import (
    OneClassPerUnit,
    Pools,
    PrivateClasses,
    RoundOutput,
    SelectionRun,
)
from selpe_audit.artifact.modes import SELPE, UTILITIES, ModeDescriptor
from selpe_audit.artifact.records import LedgerEntry
from selpe_audit.kernel.distance import Kernel
from selpe_audit.schema import Schema

if TYPE_CHECKING:  # a type only: OpenDP is called from release.dp
    from release.dp import Measurement

#: How the ledger's scope line names each utility mode (a reviewer reads it there).
UTILITY_SCOPE = {"minmax": "min-max rescaled per batch to [-1, 0]",
                 "raw": "-g(center, s) as is, in [-1, 0]"}


def batch_ids(unit_ids: list[str], key: bytes, b: int) -> np.ndarray:
    """Batch of each unit by a keyed hash of its id: data-independent, fresh key per round,
    and all rows of one person land in the same batch."""
    return np.array([int.from_bytes(hmac.new(key, u.encode(), hashlib.sha256).digest()[:8],
                                    "big") % b for u in unit_ids], dtype=np.int64)


def minmax(u: np.ndarray) -> np.ndarray:
    """``u`` rescaled to span [-1, 0]: best 0, worst -1 (all zeros when all are equal). The
    output lies in [-1, 0] whatever ``u`` is, so the L-inf sensitivity stays 1."""
    span = float(u.max() - u.min()) if u.size else 0.0
    return (u - u.max()) / span if span > 0 else np.zeros_like(u, dtype=np.float64)


def batch_utilities(priv: OneClassPerUnit, kernel: Kernel, pools: Pools, c: Any, i: int,
                    b: int, key: bytes, utility: str = "minmax") -> np.ndarray:
    """u_i(s) = -g(center_i, s) of batch i of class c (private), min-max rescaled to [-1, 0]
    unless ``utility`` is "raw"; zeros for an empty batch or class, so its noisy max picks
    uniformly at random."""
    if not isinstance(priv, OneClassPerUnit):  # the rule that makes the batches disjoint
        raise TypeError("SelPE's batches read a OneClassPerUnit input only")
    cand_features, num_scale = pools[c]
    priv_feats = priv.priv_features.get(c)
    if priv_feats is None or priv_feats.n == 0:
        return np.zeros(cand_features.n)
    rows = np.flatnonzero(batch_ids(priv.priv_unit_ids[c], key, b) == i)
    if rows.size == 0:
        return np.zeros(cand_features.n)
    center = kernel.centers(priv_feats.take(rows), np.zeros(rows.size, dtype=np.int64), 1)
    u = 0.0 - kernel.distances(center, cand_features, num_scale)[0]
    return minmax(u) if utility == "minmax" else u


def round_measurement(kernel: Kernel, pools: Pools, b: int, noise_scale: float, key: bytes,
                      combine: Callable[[dict[Any, list[int]]], Any] | None = None,
                      utility: str = "minmax") -> Measurement:
    """The round as an OpenDP chain on the private input: the one-class-per-unit rule, then
    per (class, batch) its utilities (``utility``: see `batch_utilities`) >> OpenDP's noisy
    max, in parallel. Output: per class, each batch's winning index (``combine``
    post-processes it inside the measurement)."""
    if utility not in UTILITIES:
        raise ValueError(f"unknown selpe utility {utility!r}")
    parts = {(c, i): make_batch_selector(
        lambda p, c=c, i=i: batch_utilities(p, kernel, pools, c, i, b, key, utility),
        cand_features.n, noise_scale)
        for c, (cand_features, _) in pools.items() for i in range(b)}

    def per_class(out: dict[Any, Any]) -> Any:
        votes = {c: [int(out[(c, i)]) for i in range(b)] for c in pools}
        return combine(votes) if combine is not None else votes

    return make_one_class_per_unit(OneClassPerUnit) >> make_parallel_batches(parts, per_class)


def batch_votes(priv: PrivateClasses | OneClassPerUnit, kernel: Kernel, pools: Pools, b: int,
                epsilon: float, noise_scale: float, key: bytes,
                utility: str = "minmax") -> dict[Any, list[int]]:
    """SelPE's private computation in one round (`round_measurement` run once): the winning
    candidate index of every batch, per class."""
    measurement = round_measurement(kernel, pools, b, noise_scale, key, utility=utility)
    if measurement.map(1) > epsilon:  # OpenDP's map, not ours, decides
        raise RuntimeError("noisy max scale does not meet the round's epsilon")
    return measurement(priv)


def most_chosen(votes: list[int]) -> list[int]:
    """Post-processing: candidates by the number of batches that chose them (ties: first
    chosen)."""
    counts = Counter(votes)
    return sorted(dict.fromkeys(votes), key=lambda i: -counts[i])


def one_class_per_unit(priv_rows: pl.DataFrame, schema: Schema,
                       person_field: str | None) -> pl.DataFrame:
    """SelPE's stable per-person step: keep each person's rows of one class only.

    A person's rows fall in one batch per class (keyed hash of the person id); with rows in
    several classes they would move one batch in each, and the classes would no longer
    compose in parallel. Keeping the class where the person has most rows (ties: schema
    order) depends on that person's rows alone, so one person still moves one batch of one
    class: L-inf distance 1 per round. Row-level units already sit in one class."""
    if not person_field:
        return priv_rows
    label = schema.label
    order = pl.col(label).replace_strict(list(schema.classes), range(len(schema.classes)),
                                         return_dtype=pl.UInt32)
    keep = (priv_rows.group_by(person_field, label).len()
            .sort([pl.col("len"), order], descending=[True, False])
            .unique(person_field, keep="first", maintain_order=True)  # its class, most rows
            .select(person_field, label))
    return priv_rows.join(keep, on=[person_field, label], how="semi", maintain_order="left")


class SelpeMode:
    """The paper's round, as a `release.selection.registry.SelectionMode`."""

    descriptor: ModeDescriptor = SELPE
    constructor = NOISY_MAX_CONSTRUCTOR

    def private_rows(self, priv_rows: pl.DataFrame, schema: Schema,
                     person_field: str | None) -> pl.DataFrame:
        return one_class_per_unit(priv_rows, schema, person_field)

    def round(self, cfg: SelectionConfig, kernel: Kernel, pools: Pools, t: int,
              budget: float) -> tuple[Measurement, RoundOutput]:
        m_t = cfg.quota(t)
        key = secrets.token_bytes(32)  # fresh batches every round
        # OpenDP's calibration, once per round
        scale = calibrate_noisy_max_scale(cfg.k * m_t, budget)
        measurement = round_measurement(
            kernel, pools, cfg.batches, scale, key,
            lambda votes: {c: most_chosen(v) for c, v in votes.items()}, cfg.settings.utility)
        if measurement.map(1) > budget:  # OpenDP's map of the whole round decides
            raise RuntimeError("the selpe round exceeds its epsilon")
        # charged its slot in OpenDP's adaptive compositor (the map above is at most that)
        return measurement, RoundOutput(t, budget, scale, m_t)

    def ledger_entries(self, cfg: SelectionConfig, run: SelectionRun) -> list[LedgerEntry]:
        return [LedgerEntry(
            f"selection/round/{r.round}", self.descriptor.mechanism, self.constructor,
            r.scale, float(r.epsilon or 0.0), 0.0,
            f"round {r.round}: every class, {cfg.batches} disjoint batches each; utilities "
            f"{UTILITY_SCOPE[cfg.settings.utility]}",
            "parallel across batches and classes; sequential across rounds (OpenDP adaptive "
            "composition)") for r in run.rounds]

    def artifact_block(self, cfg: SelectionConfig) -> Any | None:
        return None


MODE = register(SelpeMode())
