"""CoRTeC-style fit of one class's candidates to the released counts (post-processing only).

Given a class's M candidates and its row target A (from the class balance), the released
cells of that class are the *margins*: one per class-conditional histogram (categories or
bins of a field) and one for the cohorts, each with targets = the clamped noisy counts
rescaled to A by largest remainder (`decode.allocation`). Then:

1. IPF: inclusion weights w, one per candidate, scaled margin by margin so the weighted cell
   totals match the targets (iterative proportional fitting, raking); cells no candidate
   falls in cannot be matched and are left out;
2. systematic sampling of A candidates with inclusion probabilities proportional to w
   (capped at 1, so no candidate is taken twice), over a random order;
3. greedy swaps of a chosen for an unchosen candidate while that lowers the weighted L1
   distance sum_m weight_m * sum_cells |chosen count - target| (bounded iterations). A
   margin's weight is its precision 1 / (noise scale), relative to the most precise;
4. within-bin redraw: a numeric value that piles up - more copies in its bin than
   `FitConfig.pile_factor` times a uniform spread over the bin's grid points - has its extra
   copies redrawn uniformly within the same bin at the field's precision. Bins, and so every
   margin, are unchanged.

The class balance itself is matched exactly: each class gets exactly its row target.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from decode.allocation import allocate
from decode.released import Released
from selpe_audit.bins import grid_size, sample_in_bin
from selpe_audit.schema import Schema

_GRID = 2.0 ** 20  # the swaps' weights on this grid: their sums are exact


@dataclass(frozen=True)
class Margin:
    """One released table for one class: each candidate's cell and the target count per cell."""

    name: str
    cells: np.ndarray   # (M,) cell index of every candidate
    target: np.ndarray  # (K,) target counts, summing to the class's row target
    weight: float       # relative precision of the released cells (1 = most precise)


@dataclass(frozen=True)
class FitConfig:
    ipf_iterations: int = 100
    ipf_tolerance: float = 1e-6
    swaps_per_row: float = 2.0   # at most this many swaps per chosen row
    swap_tries: int = 16         # chosen rows tried per swap step, most helpful first
    pile_factor: float = 2.0
    redraw: bool = True


@dataclass(frozen=True)
class FitResult:
    chosen: np.ndarray            # indices into the candidates, ascending
    records: list[dict[str, Any]]  # the chosen records after within-bin redraw
    l1_sampled: float             # weighted L1 after systematic sampling
    l1_final: float               # ... and after the swaps
    swaps: int
    redrawn: int


def class_margins(released: Released, class_value: Any, records: list[dict[str, Any]],
                  a: int) -> list[Margin]:
    """The class's released cells as margins over ``records`` with targets summing to ``a``."""
    k = released.class_index(class_value)
    raw: list[tuple[str, np.ndarray, np.ndarray, float]] = []
    for name in released.histograms:
        cells = released.cells(name, [r[name] for r in records])
        raw.append((name, cells, allocate(released.dp_counts(name)[k], a),
                    1.0 / released.scale(name)))
    if released.cohorts:
        cells = np.array([released.view.counts.cohort_of(r) for r in records], dtype=np.intp)
        raw.append(("cohorts", cells, allocate(released.cohort_dp_counts()[:, k], a),
                    1.0 / released.cohort_scale))
    top = max((w for *_, w in raw), default=1.0)
    return [Margin(name, cells, target, w / top) for name, cells, target, w in raw]


def ipf_weights(margins: list[Margin], m: int, config: FitConfig) -> np.ndarray:
    """Raking: scale weights so each margin's weighted cell totals meet its targets."""
    w = np.ones(m)
    for _ in range(config.ipf_iterations):
        worst = 0.0
        for mg in margins:
            totals = np.bincount(mg.cells, weights=w, minlength=len(mg.target))
            hit = totals > 0
            factor = np.ones(len(mg.target))
            factor[hit] = mg.target[hit] / totals[hit]
            w = w * factor[mg.cells]
            worst = max(worst, float(np.max(np.abs(factor[hit] - 1.0), initial=0.0)))
        if worst < config.ipf_tolerance:
            break
    if w.max() <= 0:  # every candidate sits in a zero-target cell: no preference left
        return np.ones(m)
    # A tiny floor keeps every candidate drawable, for when too few have positive weight.
    return np.maximum(w, 1e-9 * w.max())


def inclusion_probabilities(weights: np.ndarray, a: int) -> np.ndarray:
    """pi proportional to weights, summing to ``a``, capped at 1 (capped ones are fixed)."""
    m = len(weights)
    if a >= m:
        return np.ones(m)
    pi = np.zeros(m)
    fixed = np.zeros(m, dtype=bool)
    while True:
        free = np.flatnonzero(~fixed)
        p = weights[free] * (a - fixed.sum()) / weights[free].sum()
        over = p >= 1.0
        if not over.any():
            pi[free] = p
            return pi
        fixed[free[over]] = True
        pi[free[over]] = 1.0


def systematic_sample(pi: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Systematic sampling over a random order: unit i is chosen with probability pi_i."""
    a = round(float(pi.sum()))
    order = rng.permutation(len(pi))
    cum = np.cumsum(pi[order])
    cum *= a / cum[-1]
    points = rng.random() + np.arange(a)
    hits = np.unique(order[np.minimum(np.searchsorted(cum, points, side="right"), len(pi) - 1)])
    if len(hits) < a:  # only through rounding at an interval's edge: top up by pi
        rest = np.setdiff1d(np.argsort(-pi, kind="stable"), hits, assume_unique=True)
        hits = np.sort(np.concatenate([hits, rest[:a - len(hits)]]))
    return hits


def l1_distance(margins: list[Margin], chosen: np.ndarray) -> float:
    """Weighted L1 distance of the chosen rows' cell counts to the targets."""
    return float(sum(mg.weight * np.abs(np.bincount(mg.cells[chosen], minlength=len(mg.target))
                                        - mg.target).sum() for mg in margins))


def improve_by_swaps(margins: list[Margin], chosen: np.ndarray, max_swaps: int,
                     tries: int, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """Greedy swaps (one chosen out, one unchosen in) while the weighted L1 distance drops.

    A row's effect on a margin's L1 term depends only on its cell: per margin and cell, a
    row leaving (``out``) or joining (``inn``) changes it by -weight where the cell is over
    (under) its target, else by +weight. Each row's totals (``out_cost``, ``in_cost``) are
    kept up to date where a swap flips a cell's sign, exactly: the weights are rounded to
    multiples of 2^-20, so sums of them carry no rounding error. A try corrects, for every
    margin, the pair that share a cell on the rows of that cell only."""
    if not margins:
        return chosen, 0
    m = len(margins[0].cells)
    mask = np.zeros(m, dtype=bool)
    mask[chosen] = True
    dev = [np.bincount(mg.cells[mask], minlength=len(mg.target)) - mg.target for mg in margins]
    weights = [round(mg.weight * _GRID) / _GRID for mg in margins]
    members = [_rows_per_cell(mg) for mg in margins]
    out = [w * np.where(d >= 1, -1.0, 1.0) for w, d in zip(weights, dev, strict=True)]
    inn = [w * np.where(d <= -1, -1.0, 1.0) for w, d in zip(weights, dev, strict=True)]
    out_cost = sum(o[mg.cells] for mg, o in zip(margins, out, strict=True))
    in_cost = sum(n[mg.cells] for mg, n in zip(margins, inn, strict=True))
    swaps = 0
    while swaps < max_swaps and not mask.all():
        outs = np.flatnonzero(mask)
        ranked = outs[_first_by(out_cost[outs], rng.random(len(outs)), tries)]
        joinable = np.where(mask, np.inf, in_cost)  # a chosen row cannot join
        move = None
        for i in ranked:
            delta = out_cost[i] + joinable
            for mg, o, n, rows in zip(margins, out, inn, members, strict=True):
                x = mg.cells[i]  # rows in i's cell: this margin does not change
                delta[rows[x]] -= o[x] + n[x]
            j = int(np.argmin(delta))
            if delta[j] < -1e-9:
                move = (int(i), j)
                break
        if move is None:
            break
        i, j = move
        mask[i], mask[j] = False, True
        for mg, w, d, o, n, rows in zip(margins, weights, dev, out, inn, members, strict=True):
            d[mg.cells[i]] -= 1
            d[mg.cells[j]] += 1
            for x in {int(mg.cells[i]), int(mg.cells[j])}:
                new_o, new_n = (-w if d[x] >= 1 else w), (-w if d[x] <= -1 else w)
                if new_o != o[x]:
                    out_cost[rows[x]] += new_o - o[x]
                    o[x] = new_o
                if new_n != n[x]:
                    in_cost[rows[x]] += new_n - n[x]
                    n[x] = new_n
        swaps += 1
    return np.flatnonzero(mask), swaps


def _first_by(key: np.ndarray, tie: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` smallest ``key`` values, ties broken by ``tie``, in that order:
    ``np.lexsort((tie, key))[:k]`` without sorting every row."""
    if len(key) <= k:
        return np.lexsort((tie, key))
    cut = np.partition(key, k - 1)[k - 1]
    below, at = np.flatnonzero(key < cut), np.flatnonzero(key == cut)
    need = k - len(below)
    if need < len(at):
        at = at[np.argpartition(tie[at], need - 1)[:need]]
    pick = np.concatenate([below, at])
    return pick[np.lexsort((tie[pick], key[pick]))]


def _rows_per_cell(mg: Margin) -> list[np.ndarray]:
    """Per cell of the margin, the rows in it."""
    order = np.argsort(mg.cells, kind="stable")
    bounds = np.cumsum(np.bincount(mg.cells, minlength=len(mg.target)))[:-1]
    return np.split(order, bounds)


def redraw_pileups(records: list[dict[str, Any]], schema: Schema, pile_factor: float,
                   rng: np.random.Generator) -> tuple[list[dict[str, Any]], int]:
    """Copies of ``records`` where piled-up numeric values are redrawn within their bins."""
    out = [dict(r) for r in records]
    redrawn = 0
    for f in schema.by_kind("numeric"):
        by_bin: dict[int, list[int]] = {}
        for idx, r in enumerate(out):
            by_bin.setdefault(f.bin_index(float(r[f.name])), []).append(idx)
        for j, rows in by_bin.items():
            size = grid_size(f, j)
            if size < 2:
                continue
            cap = max(1, math.ceil(pile_factor * len(rows) / size))
            seen: Counter = Counter()
            for idx in rows:
                value = out[idx][f.name]
                seen[value] += 1
                if seen[value] > cap:
                    out[idx][f.name] = sample_in_bin(f, j, rng)
                    redrawn += 1
    return out, redrawn


def fit_class(records: list[dict[str, Any]], margins: list[Margin], a: int, schema: Schema,
              rng: np.random.Generator, config: FitConfig) -> FitResult:
    """Steps 1-4 for one class: ``a`` of ``records``, fitted to ``margins``."""
    pi = inclusion_probabilities(ipf_weights(margins, len(records), config), a)
    sampled = systematic_sample(pi, rng)
    l1_sampled = l1_distance(margins, sampled)
    chosen, swaps = improve_by_swaps(margins, sampled, int(config.swaps_per_row * a),
                                     config.swap_tries, rng)
    picked = [records[i] for i in chosen]
    redrawn = 0
    if config.redraw:
        picked, redrawn = redraw_pileups(picked, schema, config.pile_factor, rng)
    return FitResult(chosen, picked, l1_sampled, l1_distance(margins, chosen), swaps, redrawn)
