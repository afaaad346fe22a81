"""Who a release charges: each person as the release sees them, matched across extracts.

The lifetime budget is a person's, not an extract's: a hospital re-keys its patient ids for
every project, a steward may add a trailing space, and one person may sit in many small
cohorts. So the ledger keeps, for every release it charged, keyed hashes of each person's
records *as the release sees them* - the id left out; each categorical value as it is;
each number by its public bin; each free text as the phrase vocabulary normalises it
(`release.phrases.normalise`) - and, where the schema names linkage fields
(``x-linkage``: fields that identify a person across extracts, such as birth year, sex and
postcode), a keyed hash of those values. A person in a new extract is one already charged
when any of their records, or their linkage values, hash as one of a charged person's did.

A number within one grid step of a bin edge (one step of its ``x-precision`` takes it into
the next bin) matches on either side: the new extract's record is also compared with that
number in the neighbouring bin, one number at a time (a heart rate moved from 99 to 100
across the edge at 100 is the same person; two numbers moved, or one moved two steps, is
not), so the stored records stay one hash each.

A new extract's records are compared with a charged one's on the fields both have, when
they share at least half of either's fields (the same records with a column dropped are the
same people; two tables that share a field or two are not compared by record). Each
charged person also keeps the releases they were charged in (their history, a
bitmask over the ledger's releases): a person matched to charged people inherits every
history they match, so one person's releases chain across extracts however their rows
change, and a person's lifetime spend is the sum of the epsilons in their history. Matching
is conservative: people whose records cannot be told apart share one spend (a table of few
coarse fields matches many strangers, which costs budget, never privacy).

Hashes are keyed with the ledger's record key (32 bits a field, combined per record) and, for
linkage, again with the ledger's linkage key, which never leaves its store (64 bits): without
the keys they say nothing of a record. Each distinct value is hashed
once, so a million rows take seconds.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from release.phrases import normalise
from selpe_audit.bins import bin_expr
from selpe_audit.errors import UserError
from selpe_audit.schema import Schema

NO_LINKAGE_TO_LEAVE_OUT = (
    "--leave-out-exhausted decides who to leave out from the people's linkage fields alone "
    "(the installation's [identity] linkage, or x-linkage in the schema), never from their "
    "records; this release has none: name them, or release without the flag")


def over_cap(n: int, people: int, caps: tuple[float, float], epsilon: float,
             where: str) -> str:
    """The refusal of a release that would take ``n`` people past their caps (how many,
    never who)."""
    return (f"{n} of the {people} people in these rows would pass their lifetime epsilon "
            f"{caps[0]:g} (or delta {caps[1]:g}) with this release's {epsilon:g}: they were "
            f"charged by earlier releases (ledger {where}); release without them with "
            "--leave-out-exhausted, or lower epsilon; no DP mechanism ran")


def over_by_content(n: int, people: int) -> str:
    """The refusal of a leave-out that record content alone would decide."""
    return (f"{n} of the {people} people in these rows would pass their lifetime cap by the "
            "records an earlier release charged, not by their linkage fields: "
            "--leave-out-exhausted leaves out only people their linkage fields name (what it "
            "left out would otherwise tell who the earlier release held); lower epsilon or "
            "release without them; no DP mechanism ran")


_RECORD_DOMAIN = b"selpe-audit/person-record/1"
_LINKAGE_DOMAIN = b"selpe-audit/person-linkage/1"
_MIX = np.uint64(0x9E3779B97F4A7C15)  # odd: a row key that depends on column order
#: bits per history word
WORD = 64


@dataclass(frozen=True)
class People:
    """One extract's people: the fields its records were seen by, per row a 32-bit keyed
    hash of each of them (``cells``) and the row's person (0..people-1), per person the
    linkage key (0: none) and the history bitmask (uint64 words)."""

    fields: tuple[str, ...]
    cells: np.ndarray         # uint32 (rows, fields)
    owners: np.ndarray        # int64 (rows,): the row's person
    linkage_keys: np.ndarray  # uint64 (people,)
    history: np.ndarray       # uint64 (people, words)
    #: a new extract's numbers near a bin edge: (field index, rows, the cell in the
    #: neighbouring bin); never stored (`to_bytes`), so a charged extract has none
    near: tuple[tuple[int, np.ndarray, np.ndarray], ...] = ()

    @property
    def count(self) -> int:
        return int(self.linkage_keys.shape[0])

    def record_keys(self, fields: Sequence[str] | None = None) -> np.ndarray:
        """Each row's key over ``fields`` (default: all of its own)."""
        cols = [self.fields.index(f) for f in (fields or self.fields)]
        return _row_keys(self.cells[:, cols])

    def near_keys(self, fields: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(keys, owners) of the rows' records over ``fields`` with one number near a bin
        edge moved into the neighbouring bin, one record per such number."""
        cols = [self.fields.index(f) for f in fields]
        keys, owners = [], []
        for j, rows, cell in self.near:
            if j not in cols:
                continue
            moved = self.cells[np.ix_(rows, cols)]
            moved[:, cols.index(j)] = cell
            keys.append(_row_keys(moved))
            owners.append(self.owners[rows])
        if not keys:
            return np.zeros(0, np.uint64), np.zeros(0, np.int64)
        return np.concatenate(keys), np.concatenate(owners)

    def subset(self, keep_people: np.ndarray, history: np.ndarray) -> People:
        """The people kept, renumbered in order, with their new ``history``."""
        keep_rows = keep_people[self.owners]
        renumber = np.cumsum(keep_people) - 1
        return People(self.fields, self.cells[keep_rows], renumber[self.owners[keep_rows]],
                      self.linkage_keys[keep_people], history)  # near: a new extract's only

    def to_bytes(self) -> bytes:
        buf = io.BytesIO()
        np.savez(buf, cells=self.cells, owners=self.owners, linkage_keys=self.linkage_keys,
                 history=self.history,
                 fields=np.frombuffer(json.dumps(list(self.fields)).encode(), np.uint8))
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> People:
        """The people `to_bytes` wrote; ValueError for anything else."""
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as z:
                people = cls(tuple(json.loads(bytes(z["fields"]).decode())), z["cells"],
                             z["owners"], z["linkage_keys"], z["history"])
        except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile) as e:
            raise ValueError(f"not a people record ({type(e).__name__})") from None
        rows, people_n = people.owners.shape[0], people.linkage_keys.shape[0]
        if people.cells.shape[0] != rows or people.history.shape[0] != people_n or \
                (rows and not 0 <= people.owners.min() <= people.owners.max() < people_n):
            raise ValueError("not a people record (its arrays disagree)")
        return people


def person_keys(key: bytes, rows: pl.DataFrame, schema: Schema, person_column: str | None,
                link: Callable[[np.ndarray], np.ndarray],
                linkage: Sequence[str] | None = None) -> People:
    """The people of ``rows`` (a frame typed by ``schema``): a person is a value of
    ``person_column`` (the privacy unit's id), else a row. History empty. ``link`` keys each
    person's linkage digest with the ledger's linkage key (`LedgerStore.link`); ``linkage``:
    the fields that name a person across extracts (default: the schema's ``x-linkage``; the
    installation's may include the id, a record number that every extract keeps)."""
    record_key = hashlib.blake2b(_RECORD_DOMAIN, digest_size=32, key=key).digest()
    views = [v for f in schema.fields if f.name != person_column
             and (v := _view(f, schema)) is not None]
    frame = rows.select(views)
    cells = _cells32(record_key, frame)
    near = _near_edges(record_key, rows, schema, frame)
    if person_column is not None:
        owners = rows[person_column].rank("dense").cast(pl.Int64).to_numpy() - 1
    else:
        owners = np.arange(rows.height, dtype=np.int64)
    people = int(owners.max()) + 1 if owners.size else 0
    linkage_keys = np.zeros(people, dtype=np.uint64)
    fields = schema.linkage_fields if linkage is None else tuple(linkage)
    if fields:
        link_key = hashlib.blake2b(_LINKAGE_DOMAIN, digest_size=32, key=key).digest()
        per_row = _row_keys(_cells(link_key, rows.select(
            [_view(schema.field(n), schema) if n != schema.id_field else
             pl.col(n).cast(pl.String).str.replace_all(r"\p{Cf}", "") for n in fields])))
        first = np.unique(owners, return_index=True)[1]  # a person's first row's values
        linkage_keys[owners[first]] = link(per_row[first])
    return People(tuple(frame.columns), cells, owners, linkage_keys,
                  np.zeros((people, 0), dtype=np.uint64), near)


def _near_edges(key: bytes, rows: pl.DataFrame, schema: Schema,
                frame: pl.DataFrame) -> tuple[tuple[int, np.ndarray, np.ndarray], ...]:
    """Per numeric field and direction, the rows whose number one grid step down (up) lies
    in another bin, and the 32-bit cell of that bin (`People.near`)."""
    out = []
    for j, name in enumerate(frame.columns):
        f = schema.field(name)
        if f.kind != "numeric" or len(f.bins) < 3:
            continue
        scale = 10 ** f.precision
        on_grid = (pl.col(name).cast(pl.Float64) * scale).round(0)
        for step in (-1, 1):  # the neighbour on the grid, exact for the bins' comparison
            moved = rows.select(((on_grid + step) / scale).alias(name)).select(bin_expr(f))
            differs = (moved[name] != frame[name]).fill_null(False).to_numpy()
            at = np.flatnonzero(differs)
            if at.size:
                out.append((j, at, _cells32(key, moved[name].gather(at).to_frame())[:, 0]))
    return tuple(out)


def _view(f: Any, schema: Schema) -> pl.Expr | None:
    """A field as the release sees it: a number's public bin, a text normalised, a category
    as its value (the id is never a part: extracts re-key it)."""
    if f.name == schema.id_field:
        return None
    if f.kind == "numeric":
        return bin_expr(f).alias(f.name)
    # Unicode format characters (Cf: the zero-width space, joiners, the word joiner, the
    # byte-order mark, bidi marks) show nothing: the same record with one is the same person
    shown = pl.col(f.name).cast(pl.String).str.replace_all(r"\p{Cf}", "")
    if f.kind == "text":
        return shown.map_elements(normalise, return_dtype=pl.String).alias(f.name)
    return shown.alias(f.name)


def _cells(key: bytes, frame: pl.DataFrame) -> np.ndarray:
    """Keyed 64-bit hashes of every cell, each distinct value of a column hashed once."""
    cells = np.empty((frame.height, frame.width), dtype=np.uint64)
    for j, c in enumerate(frame.columns):
        distinct = frame.select(pl.col(c).unique())
        hashed = distinct.with_columns(pl.Series(
            "__h", [_hash(key, c, v) for v in distinct[c].to_list()], dtype=pl.UInt64))
        cells[:, j] = frame.select(c).join(hashed, on=c, how="left", nulls_equal=True,
                                           maintain_order="left")["__h"].to_numpy()
    return cells


def _cells32(key: bytes, frame: pl.DataFrame) -> np.ndarray:
    """`_cells` cut to the 32 bits a record's cell keeps."""
    return (_cells(key, frame) & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def _hash(key: bytes, column: str, value: Any) -> int:
    text = json.dumps([column, value], sort_keys=True, default=str)
    h = hashlib.blake2b(text.encode("utf-8"), digest_size=8, key=key, person=b"cell")
    return int.from_bytes(h.digest(), "little")


def _row_keys(cells: np.ndarray) -> np.ndarray:
    key = np.zeros(cells.shape[0], dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(cells.shape[1]):
            key = (key * _MIX) ^ cells[:, j].astype(np.uint64)
    return key


def histories(new: People, charged: Iterable[People], releases: int | None = None,
              by_records: bool = True) -> np.ndarray:
    """Each new person's history: the union of the histories of every charged person they
    match (a record, on the fields both extracts have when they share most of them, or
    their linkage key; ``by_records`` False: the linkage key alone). ``charged`` may be a
    generator (one extract in memory at a time); ``releases``: how many the ledger holds
    (the words of a history; default: as many as the widest charged history)."""
    if releases is None:
        charged = list(charged)
        words = max([c.history.shape[1] for c in charged], default=0)
    else:
        words = -(-releases // WORD)
    out = np.zeros((new.count, words), dtype=np.uint64)
    mine_over: list[str] | None = None  # the fields `mine` (new records' keys) is over
    mine, owners = np.zeros(0, np.uint64), np.zeros(0, np.int64)
    for c in charged:
        if not c.count:
            continue
        wide = np.zeros((c.count, words), dtype=np.uint64)
        wide[:, :min(words, c.history.shape[1])] = c.history[:, :words]
        shared = [f for f in new.fields if f in c.fields]
        if by_records and 2 * len(shared) >= max(len(new.fields), len(c.fields)):  # same, or
            if shared != mine_over:  # a few fields less
                mine_over = shared
                near, near_owners = new.near_keys(shared)
                mine = np.concatenate([new.record_keys(shared), near])
                owners = np.concatenate([new.owners, near_owners])
                ahead = np.argsort(mine)  # sorted needles: each extract's search runs ahead
                mine, owners = mine[ahead], owners[ahead]
            theirs = c.record_keys(shared)
            order = np.argsort(theirs, kind="stable")
            keys, owner = theirs[order], c.owners[order]
            at = np.searchsorted(keys, mine)
            at[at == keys.size] = 0
            hit = keys[at] == mine
            np.bitwise_or.at(out, owners[hit], wide[owner[at[hit]]])
        if c.linkage_keys.any() and new.linkage_keys.any():
            order = np.argsort(c.linkage_keys, kind="stable")
            keys = c.linkage_keys[order]
            at = np.searchsorted(keys, new.linkage_keys)
            at[at == keys.size] = 0
            hit = (keys[at] == new.linkage_keys) & (new.linkage_keys != 0)
            out[hit] |= wide[order[at[hit]]]
    return out


def with_release(history: np.ndarray, seq: int) -> np.ndarray:
    """``history`` with release number ``seq`` added (widened as needed)."""
    words = max(history.shape[1], seq // WORD + 1)
    out = np.zeros((history.shape[0], words), dtype=np.uint64)
    out[:, :history.shape[1]] = history
    out[:, seq // WORD] |= np.uint64(1 << (seq % WORD))
    return out


def spends(history: np.ndarray, epsilons: Sequence[float]) -> np.ndarray:
    """Each person's lifetime spend: the sum of the epsilons of the releases in their
    history (``epsilons[seq]``: what release ``seq`` counts for; an aborted one, 0)."""
    eps = np.zeros(history.shape[1] * WORD)
    k = min(eps.size, len(epsilons))  # a release no history reaches yet counts for none
    eps[:k] = np.asarray(epsilons, dtype=np.float64)[:k]
    bits = np.unpackbits(history.view(np.uint8).reshape(history.shape[0], -1),
                         axis=1, bitorder="little")
    return bits[:, :eps.size].astype(np.float64) @ eps


def people_record(data: bytes, where: object) -> People:
    """A stored people record, or one line: the ledger cannot count what it cannot read."""
    try:
        return People.from_bytes(data)
    except ValueError as e:
        raise UserError(f"{where}: the people a release charged cannot be read ({e}); the "
                        "ledger refuses to answer: ask the administrator") from None
