"""Inline SVG bar charts for review.html: one row per public key, one small chart per class.

Every label and value goes through `escape_text`, so a chart is safe whatever the artifact
holds; drawing needs no script and no network.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from selpe_audit.review.view import count_flag, display_text, fmt_value


def escape_text(value: Any) -> str:
    """Escape any artifact text for HTML text and attribute values alike."""
    return html.escape(display_text(value), quote=True)


@dataclass(frozen=True)
class Cell:
    value: float | None  # None draws no bar (a suppressed rate)
    text: str
    css: str = "ok"
    note: str = ""


@dataclass(frozen=True)
class Column:
    header: str
    cells: list[Cell]
    domain: tuple[float, float] | None = None  # None: shared with the other such columns


@dataclass
class Chart:
    """Horizontal bars: one row per public key, one small chart per column (class)."""

    title: str
    rows: list[str]
    columns: list[Column]

    ROW_H = 22
    HEAD_H = 30
    COL_W = 190
    VALUE_W = 58
    MAX_LABEL = 34

    def __post_init__(self) -> None:
        """A malformed block with more counts than keys still shows every count."""
        n = max([len(self.rows), *(len(c.cells) for c in self.columns)])
        self.rows = self.rows + ["(no key)"] * (n - len(self.rows))

    def svg(self) -> str:
        labels = [r if len(r) <= self.MAX_LABEL else r[: self.MAX_LABEL - 1] + "…"
                  for r in self.rows]
        label_w = min(260, max(140, 7 * max((len(x) for x in labels), default=4) + 18))
        width = label_w + self.COL_W * max(1, len(self.columns)) + 8
        height = self.HEAD_H + self.ROW_H * len(self.rows) + 8
        shared = _domain(c.value for col in self.columns if col.domain is None
                         for c in col.cells)
        parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" '
                 f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
                 f'aria-label="{escape_text(self.title)}"><title>{escape_text(self.title)}</title>']
        for i, (label, full) in enumerate(zip(labels, self.rows, strict=True)):
            y = self.HEAD_H + i * self.ROW_H
            if i % 2 == 0:
                parts.append(f'<rect class="stripe" x="0" y="{y}" width="{width}" '
                             f'height="{self.ROW_H}"/>')
            parts.append(f'<text class="rowlabel" x="{label_w - 8}" y="{y + 15}" '
                         f'text-anchor="end"><title>{escape_text(full)}</title>{escape_text(label)}</text>')
        for j, col in enumerate(self.columns):
            parts.append(self._column(col, label_w + j * self.COL_W, col.domain or shared))
        parts.append("</svg>")
        return "".join(parts)

    def _column(self, col: Column, x0: int, domain: tuple[float, float]) -> str:
        lo, hi = domain
        bar_w = self.COL_W - self.VALUE_W - 16

        def x(v: float) -> float:
            return x0 + 8 + (v - lo) / (hi - lo) * bar_w

        bottom = self.HEAD_H + self.ROW_H * len(self.rows)
        out = [f'<line class="sep" x1="{x0}" y1="4" x2="{x0}" y2="{bottom}"/>',
               f'<text class="colhead" x="{x0 + self.COL_W / 2:.1f}" y="19" '
               f'text-anchor="middle">{escape_text(col.header)}</text>',
               f'<line class="zero" x1="{x(0):.1f}" y1="{self.HEAD_H - 4}" x2="{x(0):.1f}" '
               f'y2="{bottom}"/>']
        for i, c in enumerate(col.cells):
            y = self.HEAD_H + i * self.ROW_H
            tip = f"{col.header} · {self.rows[i]}: {c.text}"
            if c.note:
                tip += f" ({c.note})"
            out.append(f"<g><title>{escape_text(tip)}</title>")
            if c.value is not None:
                a, b = sorted((x(0), x(c.value)))
                out.append(f'<rect class="bar {c.css}" x="{a:.1f}" y="{y + 4}" '
                           f'width="{max(b - a, 1.0):.1f}" height="{self.ROW_H - 8}" rx="2"/>')
            out.append(f'<text class="val {c.css}" x="{x0 + self.COL_W - 8}" y="{y + 15}" '
                       f'text-anchor="end">{escape_text(c.text)}</text></g>')
        return "".join(out)


def _domain(values: Iterable[float | None]) -> tuple[float, float]:
    vs = [v for v in values if v is not None]
    lo, hi = min([0.0, *vs]), max([0.0, *vs])
    return (lo, hi) if hi > lo else (0.0, 1.0)


def count_cell(value: Any, floor: int, scale: float | None) -> Cell:
    v = value if isinstance(value, int | float) and not isinstance(value, bool) else None
    flag = count_flag(value, floor, scale)
    css = "ok" if not flag else ("neg" if flag == "negative" else "low")
    return Cell(float(v) if v is not None else None, fmt_value(value), css, flag or "")
