"""The ``model`` decoder: records drawn from the released counts model, given their class.

A model-mode artifact (``[counts] mode = "fixed"``, "aim" or "mst") carries every noisy
marginal OpenDP measured; this decoder refits the same model off-site (`decode.decoders.mrf`) and
draws each record's fields and topics jointly from P(fields, topics | class), so the
dependencies the model holds between fields (and between a text's topic and the fields)
survive, which independent per-field draws lose. Per record of class c:

- every model column takes its cell from the exact conditional chain (never OpenDP's null
  cell, never a numeric bin without a grid point);
- a categorical field takes the cell's category; a numeric field a value drawn uniformly
  from the bin's grid points (`selpe_audit.bins.grid`; a bin the release merged from
  public ones: all their grid points);
- a free-text field with a topic column takes one of the topic's public member texts
  (uniformly; members outside the field's length limits are never used, and a topic with
  none is never drawn); a DP keyword field with several slot columns takes its slots'
  released keywords together, as they fit (first slot "other": a released term, as
  above); a free-text field without one gets the marginals decoder's text (an exemplar
  of c, else the placeholder);
- a field the model lacks is drawn as the marginals decoder draws it.

Records are drawn in blocks of `BLOCK` as arrays: block b of class c (its records b x BLOCK ..
(b + 1) x BLOCK - 1) uses its own generator seeded by (seed, stream, c's index, b), so the
stream is the same however it is split into runs, chunks or parts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from decode.decoders.marginals import PLACEHOLDER, MarginalsDecoder
from decode.decoders.mrf import Chain, ClassChain, rebuild_model
from decode.decoders.registry import DecoderSpec, register
from decode.released import Released
from selpe_audit.artifact.model_block import CountsModel, ModelColumn, topic_column
from selpe_audit.bins import grid, grid_size, value_at
from selpe_audit.errors import UserError
from selpe_audit.schema import Field

_STREAM = 3  # apart from the marginals decoder's draws (1) and the fit's (2)
BLOCK = 256  # records drawn at once, as arrays, from one generator

NO_MODEL = ("this artifact has no counts model (it was released with counts mode "
            "\"marginals\"): decode it with --decoder marginals or llm, or release with "
            "[counts] mode = \"fixed\" (or \"aim\", \"mst\") to use --decoder model")


class ModelDecoder:
    """Samples whole records from the refitted counts model, class fixed first."""

    name = "model"

    def __init__(self, released: Released, seed: int) -> None:
        block = released.model
        if block is None:
            raise UserError(NO_MODEL)
        self.released, self.seed, self.block = released, seed, block
        self.schema = released.schema
        self.validity = 1.0  # every record is built valid; nothing is resampled
        self._base = MarginalsDecoder(released, seed)
        self._members = {c.field: self._usable_members(c) for c in block.columns
                         if c.kind == "topic"}
        allowed = {c.name: self._allowed(c) for c in block.columns}
        label = next(c.name for c in block.columns if c.kind == "class")
        chain = Chain.fit(rebuild_model(block), allowed, label)
        self._chains: dict[Any, ClassChain] = {
            c: chain.given(k) for k, c in enumerate(released.classes)}
        cols = {c.field: c.name for c in block.columns if c.kind not in ("class", "topic")}
        self._slots = {f.name: [c.name for c in block.columns  # in slot order
                                if c.kind == "topic" and c.field == f.name]
                       for f in self.schema.by_kind("text")}
        self._plan = [(f, "label" if f.name == self.schema.label else
                       "text" if f.kind == "text" else "cell",
                       topic_column(f.name) if f.kind == "text" else cols.get(f.name))
                      for f in self.schema.record_fields]
        # fields the model lacks: the marginals decoder's probabilities, as cumulative lists
        self._cdfs = {c: {f.name: np.cumsum(self._base.probs(c, f.name))
                          for f, how, col in self._plan if how == "cell" and col is None}
                      for c in released.classes}
        # per numeric field: the first grid index and the grid points of every bin (the
        # model column's: public bins, or public bins the release merged)
        edges = {c.field: c.edges for c in block.columns if c.kind == "bins"}
        self._grids = {f.name: _grid_arrays(f, edges.get(f.name) or f.bins)
                       for f in self.schema.by_kind("numeric")}
        self._keyword_cache: dict[tuple[str, tuple[int, ...]], str | None] = {}
        self._last: tuple[Any, int, list[tuple[dict[str, Any], dict[str, int]]]] = (None, -1, [])

    def _usable_members(self, col: ModelColumn) -> list[list[str]]:
        """Per topic, its member texts that fit the field's length limits."""
        f = self.schema.field(col.field)
        return [[t for t in a.members if f.min_length <= len(t) <= f.max_length]
                for a in self.released.topics[col.field].anchors]

    def _allowed(self, col: ModelColumn) -> list[int]:
        """The model cells a record may hold: never the null cell (the last one)."""
        cells = range(len(col.keys))
        if col.kind == "bins":
            f = self.schema.field(col.field)
            return [j for j in cells if grid_size(f, j, col.edges) > 0]
        if col.kind == "topic" and any(self._members[col.field]):
            return [j for j in cells if self._members[col.field][j]]
        return list(cells)

    def describe(self) -> dict[str, Any]:
        texts = {f.name: self._text_source(f) for f in self.schema.by_kind("text")}
        return {"name": self.name, "counts_model": _model_summary(self.block),
                "stream": f"blocks of {BLOCK}",
                "text_source": texts,
                "placeholder": PLACEHOLDER if "placeholder" in texts.values() else None}

    def _text_source(self, f: Field) -> str:
        """As the marginals decoder: "placeholder" when some class has no exemplar text."""
        if any(self._members.get(f.name, [])):
            return "topics"
        rel = self.released
        return "placeholder" if not all(rel.winners[c] or rel.partners[c]
                                        for c in rel.classes) else "exemplars"

    def record(self, class_value: Any, i: int) -> dict[str, Any]:
        """Record ``i`` of ``class_value``'s stream."""
        return self.draw(class_value, i)[0]

    def draw(self, class_value: Any, i: int) -> tuple[dict[str, Any], dict[str, int]]:
        """Record ``i`` of ``class_value``'s stream and, per free-text field with a topic
        column, the topic it was drawn from (the LLM decoder writes that text anew)."""
        b, at = divmod(i, BLOCK)
        if self._last[:2] != (class_value, b):
            self._last = (class_value, b, self._block(class_value, b))
        rec, topics = self._last[2][at]
        return dict(rec), dict(topics)  # copies: callers may write into them

    def _block(self, class_value: Any, b: int) -> list[tuple[dict[str, Any], dict[str, int]]]:
        """Records ``b * BLOCK .. (b + 1) * BLOCK - 1`` of the class's stream, drawn as
        arrays from one generator seeded by (seed, stream, class index, b): the model cells
        of every record first, then per field a uniform per record (a cell for a field the
        model lacks, a topic member, a grid point within a numeric bin)."""
        k = self.released.class_index(class_value)
        rng = np.random.default_rng([self.seed, _STREAM, k, b])
        chain = self._chains[class_value]
        model_cells = chain.sample(rng, BLOCK)
        at = {c: j for j, c in enumerate(chain.columns)}
        columns: list[list[Any]] = []
        topics: dict[str, list[int]] = {}
        for f, how, col in self._plan:
            u = rng.random(BLOCK)
            cells = model_cells[:, at[col]] if col in at else None
            if how == "label":
                columns.append([class_value] * BLOCK)
            elif how == "text":
                pools = self._members.get(f.name)
                if cells is None or not pools or not any(pools):
                    columns.append([self._base.draw(f, class_value, rng) for _ in range(BLOCK)])
                    continue
                slots = model_cells[:, [at[c] for c in self._slots[f.name]]].tolist()
                columns.append([self._keyword_text(f, tuple(sl)) or p[int(x * len(p))]
                                for sl, p, x in zip(slots, (pools[t] for t in cells.tolist()),
                                                    u.tolist(), strict=True)])
                topics[f.name] = cells.tolist()
            else:
                if cells is None:
                    cdf = self._cdfs[class_value][f.name]
                    cells = np.minimum(np.searchsorted(cdf, u * cdf[-1], side="right"),
                                       len(cdf) - 1)
                columns.append(self._values(f, cells, rng))
        names = [f.name for f, _, _ in self._plan]
        recs = [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)]
        tops = [dict(zip(topics, row, strict=True)) for row in zip(*topics.values(),
                                                                    strict=True)] \
            if topics else [{} for _ in range(BLOCK)]
        return list(zip(recs, tops, strict=True))

    def _values(self, f: Field, cells: np.ndarray, rng: np.random.Generator) -> list[Any]:
        """A categorical field's categories, or a numeric field's values drawn uniformly
        from the grid points of each record's bin."""
        if f.kind == "categorical":
            return [f.enum[j] for j in cells.tolist()]
        lo, size = self._grids[f.name]
        k = lo[cells] + (rng.random(len(cells)) * size[cells]).astype(np.int64)
        return [value_at(f, x) for x in k.tolist()]

    def generate(self, class_value: Any, start: int, total: int,
                 on_record: Callable[[dict[str, Any]], None]) -> None:
        """Records ``start .. total - 1`` of the class's stream, each handed to ``on_record``."""
        for i in range(start, total):
            on_record(self.record(class_value, i))

    def _keyword_text(self, f: Field, slot_cells: tuple[int, ...]) -> str | None:
        """`_keywords` for one combination of slot cells, computed once."""
        if len(slot_cells) < 2:
            return None
        key = (f.name, slot_cells)
        if key not in self._keyword_cache:
            self._keyword_cache[key] = self._keywords(
                f, dict(zip(self._slots[f.name], slot_cells, strict=True)))
        return self._keyword_cache[key]

    def _keywords(self, f: Field, cells: dict[str, int]) -> str | None:
        """A keyword text: the released keywords of its slots, in slot order, as long as they
        fit the field (a slot's "other" cell is none). Slot 1 "other" - a text with no
        released keyword - is None: the caller draws a released term as for any "other"."""
        slots = self._slots[f.name]
        vocab = self.released.topics[f.name]
        anchors, other = vocab.anchors, vocab.other
        if len(slots) < 2 or cells[slots[0]] == other:
            return None
        text = ""
        for col in slots:
            term = anchors[cells[col]].text if cells[col] != other else ""
            longer = f"{text} {term}".strip()
            if not set(term.split()) <= set(text.split()) and len(longer) <= f.max_length:
                text = longer
        return text if len(text) >= f.min_length else None

    def topic_hints(self, field: str, topic: int, text: str) -> list[str]:
        """Public texts the LLM is shown for a record's topic: a keyword record's own
        released keywords (``text``, as the model wrote it), else the topic's members."""
        if len(self._slots.get(field, ())) > 1 and topic != self.released.topics[field].other:
            return [text]
        return self.topic_texts(field, topic)

    def topic_texts(self, field: str, topic: int) -> list[str]:
        """The public member texts of a topic that fit the field (anchor text first)."""
        return self._members[field][topic]



def _grid_arrays(f: Field, edges: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Per bin of ``edges``: its first grid index and its number of grid points."""
    spans = [grid(f, j, edges) for j in range(len(edges) - 1)]
    return (np.array([lo for lo, _ in spans], dtype=np.int64),
            np.array([max(0, hi - lo) for lo, hi in spans], dtype=np.int64))


def _model_summary(block: CountsModel) -> dict[str, Any]:
    """What identifies the model in provenance (and in the checkpoint's binding)."""
    return {"algorithm": block.algorithm, "estimator": block.estimator,
            "columns": [c.name for c in block.columns],
            "marginals": [list(m.clique) for m in block.marginals]}


SPEC = register(DecoderSpec(
    name="model", help="whole records from the released counts model (artifacts released "
                       "with [counts] mode = \"fixed\", \"aim\" or \"mst\")",
    build=lambda released, settings, seed, llm: ModelDecoder(released, seed),
    needs_counts_model=True))
