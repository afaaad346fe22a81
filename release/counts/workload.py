"""The model counts' workload sized to the table: which marginals, over which bins.

Chosen from public facts alone - the schema's fields, categories and bins, the counts'
rho, the privacy unit's bound - and the one DP count of the rows (`release.plan`), before
any other measurement, so it reads nothing private beyond that count: two tables with the
same count get the same workload. A class x field cell is worth measuring when its expected
count (the rows spread evenly over the classes and the field's cells) reaches
``signal_sigmas`` standard deviations of the Gaussian noise the marginal would get, and that
noise shrinks as fewer marginals share the rho. So, until every class marginal passes:

- a numeric field's adjacent public bins are merged, the narrowest pair first (under a
  uniform prior on the field's range it holds the fewest rows), down to two bins;
- a field that still falls short (the one with the smallest expected cell count first) is
  measured by its own 1-way marginal instead, at 1 / classes of a class marginal's rho (its
  cells hold as many times more rows, so it needs less), and the noise is planned again
  for the rest.

Decode draws a number uniformly among the grid points of its merged bin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from selpe_audit.bins import grid_size
from selpe_audit.schema import Field, Schema, format_edges


@dataclass(frozen=True)
class FieldWorkload:
    """How one field enters the counts: its class x field marginal, or its own 1-way one,
    over ``edges`` (a numeric field's bins: public edges, adjacent bins merged; None for a
    categorical field), and why."""

    field: str
    margin: Literal["class", "one-way"]
    edges: tuple[float, ...] | None
    reason: str


@dataclass(frozen=True)
class Workload:
    """The planned workload: per field its margin and bins, the Gaussian standard deviation
    of a class x field cell it was planned with, and the rule's ``signal_sigmas``."""

    fields: tuple[FieldWorkload, ...]
    noise_sigma: float
    signal_sigmas: float

    def field(self, name: str) -> FieldWorkload | None:
        return next((f for f in self.fields if f.field == name), None)


def public_workload(schema: Schema) -> Workload:
    """Every field's class marginal over its public bins (the workload before sizing)."""
    return Workload(tuple(FieldWorkload(f.name, "class", _public_edges(f), "every field")
                          for f in _fields(schema)), 0.0, 0.0)


def size_workload(schema: Schema, rows: float, rho: float, sensitivity: float,
                  class_share: float, topic_share: float, topic_columns: int,
                  signal_sigmas: float) -> Workload:
    """The workload for a table of about ``rows`` rows (the DP count) whose model marginals
    share ``rho`` (zCDP); ``sensitivity``: one unit's L2 reach in one marginal (its row
    bound); the class balance gets ``class_share`` of the rho and ``topic_columns`` text
    topics ``topic_share`` (none: the fields take it). ``signal_sigmas`` 0: every field's
    class marginal over its public bins."""
    fields = _fields(schema)
    if signal_sigmas <= 0 or not fields:
        return public_workload(schema)
    classes = len(schema.classes)
    fields_share = 1 - class_share - (topic_share if topic_columns else 0.0)
    one_way: list[Field] = []
    while True:
        in_class = [f for f in fields if f not in one_way]
        weight = len(in_class) + len(one_way) / classes
        share = fields_share / weight if weight else 0.0
        sigma = sensitivity / math.sqrt(2 * share * rho) if share * rho > 0 else math.inf
        need = signal_sigmas * sigma
        edges = {f.name: _merged(f, rows / classes, need) for f in in_class}
        short = [f for f in in_class if rows / classes / _cells(f, edges[f.name]) < need]
        if not short:
            break
        one_way.append(min(short, key=lambda f: rows / _cells(f, edges[f.name])))
    planned = []
    for f in fields:
        if f in one_way:
            e = _merged(f, rows, need * math.sqrt(classes))  # its noise: sqrt(classes) x
            planned.append(FieldWorkload(f.name, "one-way", e, _one_way_reason(
                f, rows, classes, need)))
        else:
            e = edges[f.name]
            planned.append(FieldWorkload(f.name, "class", e, _class_reason(
                f, e, rows / classes, need)))
    return Workload(tuple(planned), sigma, signal_sigmas)


def _fields(schema: Schema) -> list[Field]:
    return [f for f in schema.record_fields
            if f.kind in ("categorical", "numeric") and f.name != schema.label]


def _public_edges(f: Field) -> tuple[float, ...] | None:
    return tuple(f.bins) if f.kind == "numeric" else None


def _cells(f: Field, edges: tuple[float, ...] | None) -> int:
    return len(f.enum) if edges is None else len(edges) - 1


def _merged(f: Field, rows: float, need: float) -> tuple[float, ...] | None:
    """``f``'s public bins with the narrowest adjacent pair merged while a cell's expected
    count (``rows`` spread over the cells) is below ``need``, down to two bins."""
    if f.kind != "numeric":
        return None
    edges = list(f.bins)
    while len(edges) > 3 and rows / (len(edges) - 1) < need:
        widths = [grid_size(f, j, edges) + grid_size(f, j + 1, edges)
                  for j in range(len(edges) - 2)]
        del edges[1 + widths.index(min(widths))]
    return tuple(edges)


def _class_reason(f: Field, edges: tuple[float, ...] | None, per_class: float,
                  need: float) -> str:
    cells = _cells(f, edges)
    merged = "" if edges is None or len(edges) == len(f.bins) else (
        f"; public bins merged to {format_edges(edges)}")
    return (f"class x {f.name}: about {per_class / cells:.3g} rows a cell against "
            f"{need:.3g} needed{merged}")


def _one_way_reason(f: Field, rows: float, classes: int, need: float) -> str:
    cells = 2 if f.kind == "numeric" else len(f.enum)
    return (f"{f.name} alone: a class x {f.name} cell would hold about "
            f"{rows / classes / cells:.3g} rows against {need:.3g} needed")
