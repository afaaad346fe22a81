"""Values inside a public numeric bin at the field's precision (sampling and within-bin redraw).

A number field with ``x-precision`` p takes values on the grid k / 10^p (integers: p = 0).
Bin j is [e_j, e_j+1) and the last bin is closed, as in `Field.bin_index`, so the grid points
of bin j are k in [lo, hi) below. A bin narrower than the grid step may hold none.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import polars as pl

from selpe_audit.schema import Field

# Edges times 10^p are rounded to this many decimals first, so 36.3 * 10 counts as 363.
_EDGE_DECIMALS = 6


def bin_expr(f: Field) -> pl.Expr:
    """Row-by-row index of a numeric field's public bin (as `Field.bin_index`), as a polars
    expression of u32."""
    inner = f.bins[1:-1]
    if not inner:
        return pl.lit(0, dtype=pl.UInt32)
    return pl.sum_horizontal([pl.col(f.name) >= e for e in inner]).cast(pl.UInt32)


def grid(f: Field, j: int, edges: Sequence[float] | None = None) -> tuple[int, int]:
    """Grid indices ``[lo, hi)`` of bin ``j`` of numeric field ``f`` (empty if lo >= hi);
    ``edges``: the bins' edges when not the field's public ones (merged public bins)."""
    edges = f.bins if edges is None else edges
    scale = 10 ** f.precision
    a = round(edges[j] * scale, _EDGE_DECIMALS)
    b = round(edges[j + 1] * scale, _EDGE_DECIMALS)
    last = j == len(edges) - 2
    return math.ceil(a), (math.floor(b) + 1) if last else math.ceil(b)


def grid_size(f: Field, j: int, edges: Sequence[float] | None = None) -> int:
    lo, hi = grid(f, j, edges)
    return max(0, hi - lo)


def value_at(f: Field, k: int) -> int | float:
    """The field value of grid index ``k`` (an int for integer fields)."""
    if f.is_integer:
        return int(k)
    return round(k / 10 ** f.precision, f.precision)


def sample_in_bin(f: Field, j: int, rng: np.random.Generator) -> int | float:
    """A value drawn uniformly from the grid points of bin ``j`` (which must hold some)."""
    lo, hi = grid(f, j)
    return value_at(f, int(rng.integers(lo, hi)))
