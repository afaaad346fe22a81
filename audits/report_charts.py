"""Inline SVG charts for the audit report: paired bars, heat maps and ROC curves.

Drawn here, like review.html's charts (`selpe_audit.review.charts`), because a page that
must open offline under a strict CSP needs static SVG and no script; every label goes
through `escape_text`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from selpe_audit.review.charts import escape_text as _e

LABEL_MAX = 30


def _short(label: str, n: int = LABEL_MAX) -> str:
    return label if len(label) <= n else label[: n - 1] + "…"


def _svg_open(width: float, height: float, title: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width:.0f}" '
            f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" role="img" '
            f'aria-label="{_e(title)}"><title>{_e(title)}</title>')


def paired_bars(title: str, labels: Sequence[str], real: Sequence[float | None],
                synthetic: Sequence[float | None], *, fmt: str = "pct",
                domain: tuple[float, float] = (0.0, 1.0), names: tuple[str, str] = (
                    "real", "synthetic")) -> str:
    """Two horizontal bars per category: real (grey) above synthetic (blue)."""
    lo, hi = domain
    if fmt == "pct":  # shares: the longest bar spans the chart
        lo, hi = 0.0, max((v or 0.0 for v in (*real, *synthetic)), default=0.0) or 1.0
    label_w = min(240, max(90, 7 * max((len(_short(x)) for x in labels), default=4) + 16))
    bar_w, value_w, row_h = 260, 56, 26
    width = label_w + bar_w + value_w + 16
    height = 26 + row_h * len(labels) + 6
    parts = [_svg_open(width, height, title),
             f'<rect class="bar real" x="{label_w}" y="6" width="10" height="10"/>'
             f'<text x="{label_w + 14}" y="15">{_e(names[0])}</text>'
             f'<rect class="bar syn" x="{(x2 := label_w + 30 + 7 * len(names[0]))}" y="6" '
             f'width="10" height="10"/><text x="{x2 + 14}" y="15">{_e(names[1])}</text>']

    def x(v: float) -> float:
        return label_w + (min(max(v, lo), hi) - lo) / (hi - lo) * bar_w

    def text(v: float | None) -> str:
        if v is None:
            return "-"
        return f"{100 * v:.1f} %" if fmt == "pct" else f"{v:.3f}"

    for i, label in enumerate(labels):
        y = 26 + i * row_h
        if i % 2 == 0:
            parts.append(f'<rect class="stripe" x="0" y="{y}" width="{width}" height="{row_h}"/>')
        parts.append(f'<text class="rowlabel" x="{label_w - 8}" y="{y + 17}" text-anchor="end">'
                     f"<title>{_e(label)}</title>{_e(_short(label))}</text>")
        for k, (v, css) in enumerate(((real[i], "real"), (synthetic[i], "syn"))):
            yy = y + 3 + k * 10
            tip = f"{label} · {names[k]}: {text(v)}"
            if v is not None:
                parts.append(f'<rect class="bar {css}" x="{label_w}" y="{yy}" '
                             f'width="{max(x(v) - label_w, 0.5):.1f}" height="9">'
                             f"<title>{_e(tip)}</title></rect>")
            parts.append(f'<text class="val small" x="{width - 6}" y="{yy + 8}" '
                         f'text-anchor="end">{_e(text(v))}</text>')
    parts.append("</svg>")
    return "".join(parts)


def heatmap(title: str, labels: Sequence[str], matrix: Sequence[Sequence[float | None]], *,
            domain: tuple[float, float] = (0.0, 1.0), diverging: bool = False,
            columns: Sequence[str] | None = None) -> str:
    """A matrix as coloured cells with their values (blank: undefined): rows ``labels``,
    columns ``columns`` (default the same labels: a square matrix)."""
    cols = list(labels if columns is None else columns)
    n, m = len(labels), len(cols)
    cell = max(18, min(34, 300 // max(n, m, 1)))
    label_w = min(150, max(60, round(6.5 * max((len(_short(x, 22)) for x in (*labels, *cols)),
                                                default=4)) + 12))
    width, height = label_w + cell * m + 40, label_w + cell * n + 8
    lo, hi = domain
    parts = [_svg_open(width, height, title)]
    for i, name in enumerate(labels):
        y = label_w + i * cell
        parts.append(f'<text class="rowlabel" x="{label_w - 6}" y="{y + cell / 2 + 4:.0f}" '
                     f'text-anchor="end"><title>{_e(name)}</title>{_e(_short(name, 22))}</text>')
    for j, name in enumerate(cols):
        cx = label_w + j * cell + cell / 2
        parts.append(f'<text class="rowlabel" transform="translate({cx + 4:.0f},{label_w - 6}) '
                     f'rotate(-60)"><title>{_e(name)}</title>{_e(_short(name, 22))}</text>')
    for i in range(n):
        for j in range(m):
            v = matrix[i][j]
            x, y = label_w + j * cell, label_w + i * cell
            if v is None:
                parts.append(f'<rect class="hm-none" x="{x}" y="{y}" width="{cell - 1}" '
                             f'height="{cell - 1}"/>')
                continue
            t = min(1.0, max(0.0, (v - lo) / (hi - lo)))
            fill = _diverging(v, max(abs(lo), abs(hi))) if diverging else _sequential(t)
            ink = "#fff" if (abs(v) / max(abs(lo), abs(hi)) if diverging else t) > 0.55 \
                else "#1d2430"
            tip = f"{labels[i]} × {cols[j]}: {v:.3f}"
            parts.append(f'<g><title>{_e(tip)}</title><rect x="{x}" y="{y}" width="{cell - 1}" '
                         f'height="{cell - 1}" fill="{fill}"/><text x="{x + cell / 2:.1f}" '
                         f'y="{y + cell / 2 + 4:.1f}" text-anchor="middle" class="hm" '
                         f'fill="{ink}">{abs(v) * 100:.0f}</text></g>')  # sign: the colour
    parts.append("</svg>")
    return "".join(parts)


def _sequential(t: float) -> str:
    """White to the report's blue."""
    r, g, b = (round(255 + (c - 255) * t) for c in (0x23, 0x4e, 0x8f))
    return f"#{r:02x}{g:02x}{b:02x}"


def _diverging(v: float, span: float) -> str:
    """Blue for negative, white for zero, red for positive."""
    t = min(1.0, abs(v) / span) if span else 0.0
    target = (0xb3, 0x26, 0x1e) if v > 0 else (0x23, 0x4e, 0x8f)
    r, g, b = (round(255 + (c - 255) * t) for c in target)
    return f"#{r:02x}{g:02x}{b:02x}"


@dataclass(frozen=True)
class Curve:
    name: str
    fpr: Sequence[float]
    tpr: Sequence[float]
    css: str  # "c0", "c1", "bound", "chance"


def roc_chart(title: str, curves: Sequence[Curve], *, log: bool = False) -> str:
    """ROC curves on linear axes, or on log-log axes from FPR 1e-3 (where a membership
    attack's power at low false-positive rates shows)."""
    size, pad = 300, 44
    lo = 1e-3

    def pos(v: float) -> float:
        if not log:
            return v
        return (math.log10(max(v, lo)) - math.log10(lo)) / -math.log10(lo)

    def px(v: float) -> float:
        return pad + pos(v) * size

    def py(v: float) -> float:
        return 10 + (1 - pos(v)) * size

    width, height = pad + size + 150, size + 50
    parts = [_svg_open(width, height, title),
             f'<rect class="frame" x="{pad}" y="10" width="{size}" height="{size}"/>']
    ticks = [1e-3, 1e-2, 1e-1, 1.0] if log else [0.0, 0.25, 0.5, 0.75, 1.0]
    for t in ticks:
        label = f"{t:g}"
        parts.append(f'<line class="grid" x1="{px(t):.1f}" y1="10" x2="{px(t):.1f}" '
                     f'y2="{10 + size}"/><line class="grid" x1="{pad}" y1="{py(t):.1f}" '
                     f'x2="{pad + size}" y2="{py(t):.1f}"/>'
                     f'<text class="small" x="{px(t):.1f}" y="{size + 24}" '
                     f'text-anchor="middle">{label}</text><text class="small" x="{pad - 4}" '
                     f'y="{py(t) + 4:.1f}" text-anchor="end">{label}</text>')
    parts.append(f'<text class="small" x="{pad + size / 2}" y="{size + 42}" '
                 f'text-anchor="middle">false-positive rate</text>'
                 f'<text class="small" transform="translate(12,{10 + size / 2}) rotate(-90)" '
                 f'text-anchor="middle">true-positive rate</text>')
    for k, c in enumerate(curves):
        pts = [(f, t) for f, t in zip(c.fpr, c.tpr, strict=True) if not log or f >= lo / 2]
        path = " ".join(f"{px(f):.1f},{py(t):.1f}" for f, t in pts)
        parts.append(f'<polyline class="curve {c.css}" points="{path}">'
                     f"<title>{_e(c.name)}</title></polyline>")
        y = 24 + 20 * k
        parts.append(f'<line class="curve {c.css}" x1="{pad + size + 10}" y1="{y - 4}" '
                     f'x2="{pad + size + 30}" y2="{y - 4}"/><text class="small" '
                     f'x="{pad + size + 34}" y="{y}">{_e(_short(c.name, 20))}</text>')
    parts.append("</svg>")
    return "".join(parts)
