"""SelPE progressive selection (the paper's Algorithm 1), one OpenDP round at a time.

    for t = 1..T:
        m_t = ceil(t q)                                     # the round's quota
        for each class c:
            S_c = Generate(K m_t | schema, W_c, P_c)        # public inputs only: no cost
        ranked = Round_t(private rows, S)                   # the mode's OpenDP measurement
        W_c = the first m_t of ranked_c; P_c = each winner's farthest candidate
    return every round's W_c and P_c

Only the round differs between modes (`release.selection.registry`); selpe's round is the
per-batch noisy max of the paper. Private features and batch centers exist only inside
the round measurement and `PrivateClasses`: never written, logged or returned. Rounds
compose sequentially through OpenDP's adaptive compositor, so each round's candidates may
depend on earlier winners.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from release.config_sections import SelectionConfig
from release.selection.accounting import compositor, round_budgets, total
from release.selection.candidates import CandidateSource
from release.selection.registry import get
from release.selection.types import Pools, PrivateClasses, RoundOutput, SelectionRun
from selpe_audit.artifact.records import SelectedClass
from selpe_audit.kernel.distance import Features, Kernel, NumericScale
from selpe_audit.schema import Schema


def run_selection(schema: Schema, priv: PrivateClasses, kernel: Kernel,
                  source: CandidateSource, cfg: SelectionConfig, epsilon: float,
                  delta: float = 0.0, hints: dict[Any, dict[str, str]] | None = None,
                  progress: Callable[[str], None] | None = None) -> SelectionRun:
    """Algorithm 1 in ``cfg.mode``. ``delta`` is used by zCDP modes only (the conversion
    to (epsilon, delta)); pure modes spend ``epsilon`` alone."""
    mode = get(cfg.mode)
    budgets = round_budgets(mode.descriptor, cfg, epsilon, delta)
    composed = compositor(mode.descriptor, budgets)
    queryable = composed(priv)
    winners: dict[Any, list[dict]] = {c: [] for c in schema.classes}
    partners: dict[Any, list[dict]] = {c: [] for c in schema.classes}
    rounds: list[RoundOutput] = []
    for t, budget_t in enumerate(budgets, start=1):
        m_t = cfg.quota(t)
        cand: dict[Any, list[dict]] = {}
        pools: Pools = {}
        for c in schema.classes:
            if progress:
                progress(f"round {t}/{cfg.rounds}: {cfg.k * m_t} candidates for class {c}")
            cand[c] = source.generate(class_value=c, positives=winners[c][-cfg.batches:],
                                      negatives=partners[c][-cfg.batches:],
                                      hints=(hints or {}).get(c), n=cfg.k * m_t)
            cand_features = kernel.featurize(cand[c])
            pools[c] = (cand_features, kernel.fit_scale(cand_features))
        measurement, out = mode.round(cfg, kernel, pools, t, budget_t)
        dp_ranked = queryable(measurement)  # per class: candidate indices, best first
        for c in schema.classes:
            winners[c], partners[c] = _winners_and_partners(kernel, pools[c], cand[c],
                                                            dp_ranked[c][:m_t])
            out.classes.append(SelectedClass(c, tuple(winners[c]), tuple(partners[c])))
        rounds.append(out)
    return SelectionRun(rounds, total(mode.descriptor, mode.constructor, composed,
                                      budgets, rounds, delta))


def _winners_and_partners(kernel: Kernel, pool: tuple[Features, NumericScale],
                          cand: list[dict], idx: list[int]) -> tuple[list[dict], list[dict]]:
    """Post-processing of DP indices: the chosen candidates and, for each, its farthest
    candidate (the contrastive partner)."""
    cand_features, num_scale = pool
    far = kernel.pairwise(cand_features.take(np.array(idx)), cand_features,
                          num_scale).argmax(axis=1)
    return [cand[i] for i in idx], [cand[int(j)] for j in far]
