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
import hmac
import io
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

_DOMAIN = b"selpe-audit/unit-hash/1"
_FINGERPRINT_DOMAIN = b"selpe-audit/dataset-fingerprint/2\0"
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


def hash_units(folder_key: bytes, frame: pl.DataFrame, unit_column: str | None) -> UnitHashes:
    """Keyed cell hashes of ``frame``'s rows (each distinct value of a column hashed once);
    the unit of a row is its ``unit_column`` value (a person), else the row itself."""
    key = unit_key(folder_key)
    columns = tuple(sorted(frame.columns))
    cells = np.empty((frame.height, len(columns)), dtype=np.uint64)
    for j, c in enumerate(columns):
        distinct = frame.select(pl.col(c).unique())
        hashed = distinct.with_columns(pl.Series(
            "__h", [_cell_hash(key, v) for v in distinct[c].to_list()], dtype=pl.UInt64))
        cells[:, j] = frame.select(c).join(hashed, on=c, how="left", nulls_equal=True,
                                           maintain_order="left")["__h"].to_numpy()
    if unit_column is not None and unit_column in columns:
        units = cells[:, columns.index(unit_column)].copy()
    else:
        units = _row_keys(cells)
    return UnitHashes(columns, cells, units)


def fingerprint(folder_key: bytes, units: UnitHashes) -> str:
    """A keyed hash of the multiset of rows (order of rows and columns does not matter):
    the same rows under another name are the same dataset at once."""
    mac = hmac.new(folder_key, _FINGERPRINT_DOMAIN + json.dumps(units.columns).encode(),
                   hashlib.sha256)
    mac.update(np.sort(_row_keys(units.cells)).tobytes())
    return mac.hexdigest()


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
