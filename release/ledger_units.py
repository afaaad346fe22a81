"""Keyed hashes of a dataset's privacy units, and how much two datasets share.

A dataset is charged by the people in it, not by its name or its exact bytes: the same
rows minus one, or minus a column, hold the same people and must share their budget. So
the ledger keeps, for every dataset it has charged, one 64-bit keyed hash per cell (value
only, keyed with the ledger folder's secret; nothing about a value can be read without it)
and the unit each row belongs to (the person id's hash, else the row itself).

Two datasets are compared on the columns they share: a row matches when the other dataset
holds a row with the same values in every shared column, and a unit overlaps when any of
its rows matches. The overlap is the share of units of the *smaller* dataset that overlap,
so a subset, a superset and a near-copy all score near 1. It is conservative: a table with
few low-entropy columns (no id, no free text) can score high against an unrelated one; such
a release is refused naming the other dataset, and it can only cost budget, never leak it.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

_DOMAIN = b"selpe-audit/unit-hash/1"
_MIX = np.uint64(0x9E3779B97F4A7C15)  # odd: a row key that depends on column order


@dataclass(frozen=True)
class UnitHashes:
    """Per-row keyed cell hashes (rows x columns) and each row's unit hash."""

    columns: tuple[str, ...]
    cells: np.ndarray  # uint64, shape (rows, len(columns))
    units: np.ndarray  # uint64, shape (rows,)

    def to_bytes(self) -> bytes:
        buf = io.BytesIO()
        np.savez(buf, cells=self.cells, units=self.units,
                 columns=np.frombuffer(json.dumps(list(self.columns)).encode(), np.uint8))
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> UnitHashes:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            columns = tuple(json.loads(bytes(z["columns"]).decode()))
            return cls(columns, z["cells"], z["units"])


def _cell_hash(key: bytes, value: Any) -> int:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    h = hashlib.blake2b(text.encode("utf-8"), digest_size=8, key=key, person=b"cell")
    return int.from_bytes(h.digest(), "little")


def unit_key(folder_key: bytes) -> bytes:
    """The cell-hash key, derived from the folder's secret for this use only."""
    return hashlib.blake2b(_DOMAIN, digest_size=32, key=folder_key).digest()


def hash_units(folder_key: bytes, rows: Iterable[Mapping[str, Any]],
               unit_column: str | None) -> UnitHashes:
    """Keyed cell hashes of ``rows``; the unit of a row is its ``unit_column`` value (a
    person), else the row (the hash of all its cells)."""
    key = unit_key(folder_key)
    rows = list(rows)
    columns = tuple(sorted({c for r in rows for c in r}))
    cells = np.empty((len(rows), len(columns)), dtype=np.uint64)
    for j, c in enumerate(columns):
        seen: dict[Any, int] = {}  # most columns repeat their values: hash each once
        for i, r in enumerate(rows):
            v = r.get(c)
            marker = (type(v), v) if isinstance(v, str | int | float | bool) or v is None else None
            h = seen.get(marker) if marker is not None else None
            if h is None:
                h = _cell_hash(key, v)
                if marker is not None:
                    seen[marker] = h
            cells[i, j] = h
    if unit_column is not None and unit_column in columns:
        units = cells[:, columns.index(unit_column)].copy()
    else:
        units = _row_keys(cells)
    return UnitHashes(columns, cells, units)


def _row_keys(cells: np.ndarray) -> np.ndarray:
    key = np.zeros(cells.shape[0], dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(cells.shape[1]):
            key = (key * _MIX) ^ cells[:, j]
    return key


def overlap(new: UnitHashes, old: UnitHashes) -> float:
    """Share of the smaller dataset's units that have a row matching the other dataset on
    every shared column; 0 when the two share no column."""
    shared = sorted(set(new.columns) & set(old.columns))
    if not shared or not len(new.units) or not len(old.units):
        return 0.0
    a = _row_keys(new.cells[:, [new.columns.index(c) for c in shared]])
    b = _row_keys(old.cells[:, [old.columns.index(c) for c in shared]])
    new_hit = np.unique(new.units[np.isin(a, b)]).size / np.unique(new.units).size
    old_hit = np.unique(old.units[np.isin(b, a)]).size / np.unique(old.units).size
    return float(max(new_hit, old_hit))
