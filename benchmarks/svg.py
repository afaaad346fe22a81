"""Tiny dependency-free SVG charts for RESULTS.md: a line chart and a grouped bar chart.

Standalone files (inline styles, no script, no fonts to fetch) that GitHub and any browser
show as images. Every text goes through ``html.escape``. The review page's charts
(``selpe_audit.review.charts``) style themselves with the page's CSS, so they are not
reused here: a linked .svg file has no page around it.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
          "#7f7f7f")
FONT = 'font-family="sans-serif" font-size="12"'


def _esc(x: object) -> str:
    return html.escape(str(x), quote=True)


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About ``n`` round tick values covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    out = [round(i * step, 10) for i in range(first, last + 1)]
    return out if len(out) > 1 else [out[0], round(out[0] + step, 10)]


def _fmt(v: float) -> str:
    return f"{v:g}" if abs(v) >= 1e-3 or v == 0 else f"{v:.1e}"


def _frame(width: int, height: int, title: str) -> list[str]:
    return [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{_esc(title)}">',
            f"<title>{_esc(title)}</title>",
            f'<rect width="{width}" height="{height}" fill="white"/>',
            f'<text x="{width / 2:.0f}" y="18" text-anchor="middle" {FONT} '
            f'font-weight="bold">{_esc(title)}</text>']


def _legend(names: Sequence[str], x: float, y: float, colors: Sequence[str] | None = None,
            dashed: Sequence[str] = ()) -> list[str]:
    out = []
    for i, name in enumerate(names):
        yy = y + 16 * i
        color = colors[i] if colors else COLORS[i % len(COLORS)]
        if colors is None:
            out.append(f'<rect x="{x:.0f}" y="{yy - 9:.0f}" width="12" height="10" '
                       f'fill="{color}"/>')
        else:
            dash = ' stroke-dasharray="4,3"' if name in dashed else ""
            out.append(f'<line x1="{x:.0f}" x2="{x + 14:.0f}" y1="{yy - 4:.0f}" '
                       f'y2="{yy - 4:.0f}" stroke="{color}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{x + 19:.0f}" y="{yy:.0f}" {FONT}>{_esc(name)}</text>')
    return out


def line_chart(title: str, x_labels: Sequence[str], series: dict[str, Sequence[float | None]],
               y_label: str = "", reference: tuple[float, str] | None = None,
               width: int = 560, height: int = 320, color_of: dict[str, int] | None = None,
               dashed: Sequence[str] = ()) -> str:
    """One line per series over categorical x positions (None leaves a gap); an optional
    dashed horizontal reference line with its label (a target). ``color_of`` gives series
    a shared colour (by index), ``dashed`` names series drawn dashed."""
    left, right, top, bottom = 58, 150, 36, 42
    pw, ph = width - left - right, height - top - bottom
    values = [v for s in series.values() for v in s if v is not None]
    if reference is not None:
        values.append(reference[0])
    lo, hi = min([0.0, *values]), max([0.0, *values]) or 1.0
    ticks = nice_ticks(lo, hi)
    lo, hi = ticks[0], ticks[-1]

    def px(i: int) -> float:
        return left + (pw * (i + 0.5) / max(1, len(x_labels)))

    def py(v: float) -> float:
        return top + ph - (v - lo) / (hi - lo) * ph

    out = _frame(width, height, title)
    for t in ticks:
        out += [f'<line x1="{left}" x2="{left + pw}" y1="{py(t):.1f}" y2="{py(t):.1f}" '
                f'stroke="#ddd"/>',
                f'<text x="{left - 6}" y="{py(t) + 4:.1f}" text-anchor="end" {FONT}>'
                f"{_fmt(t)}</text>"]
    out.append(f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + ph}" stroke="#333"/>')
    for i, lab in enumerate(x_labels):
        out.append(f'<text x="{px(i):.1f}" y="{top + ph + 16}" text-anchor="middle" {FONT}>'
                   f"{_esc(lab)}</text>")
    if y_label:
        out.append(f'<text x="14" y="{top + ph / 2:.0f}" text-anchor="middle" {FONT} '
                   f'transform="rotate(-90 14 {top + ph / 2:.0f})">{_esc(y_label)}</text>')
    if reference is not None:
        out += [f'<line x1="{left}" x2="{left + pw}" y1="{py(reference[0]):.1f}" '
                f'y2="{py(reference[0]):.1f}" stroke="#555" stroke-dasharray="5,4"/>',
                f'<text x="{left + pw - 4}" y="{py(reference[0]) - 4:.1f}" text-anchor="end" '
                f'{FONT} fill="#555">{_esc(reference[1])}</text>']
    colors = [COLORS[(color_of or {}).get(name, k) % len(COLORS)]
              for k, name in enumerate(series)]
    for k, (name, ys) in enumerate(series.items()):
        color = colors[k]
        dash = ' stroke-dasharray="6,4"' if name in dashed else ""
        runs: list[list[tuple[float, float]]] = [[]]
        for i, v in enumerate(ys):
            if v is None:
                runs.append([])
            else:
                runs[-1].append((px(i), py(v)))
        for run in runs:
            if len(run) > 1:
                pts = " ".join(f"{a:.1f},{b:.1f}" for a, b in run)
                out.append(f'<polyline points="{pts}" fill="none" stroke="{color}" '
                           f'stroke-width="2"{dash}/>')
            out += [f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3" fill="{color}"/>' for a, b in run]
    out += _legend(list(series), left + pw + 14, top + 12, colors, dashed)
    out.append("</svg>")
    return "\n".join(out)


def bar_chart(title: str, groups: Sequence[str], series: dict[str, Sequence[float | None]],
              x_label: str = "", width: int = 620) -> str:
    """Horizontal grouped bars: one group per row label, one bar per series (None: none)."""
    left, right, top = 150, 150, 36
    bar_h, gap = 9, 8
    group_h = bar_h * max(1, len(series)) + gap
    pw = width - left - right
    height = top + group_h * len(groups) + 34
    values = [v for s in series.values() for v in s if v is not None]
    ticks = nice_ticks(min([0.0, *values]), max([0.0, *values]) or 1.0)
    lo, hi = ticks[0], ticks[-1]

    def px(v: float) -> float:
        return left + (v - lo) / (hi - lo) * pw

    out = _frame(width, height, title)
    bottom = top + group_h * len(groups)
    for t in ticks:
        out += [f'<line x1="{px(t):.1f}" x2="{px(t):.1f}" y1="{top}" y2="{bottom}" '
                f'stroke="#ddd"/>',
                f'<text x="{px(t):.1f}" y="{bottom + 14}" text-anchor="middle" {FONT}>'
                f"{_fmt(t)}</text>"]
    if x_label:
        out.append(f'<text x="{left + pw / 2:.0f}" y="{bottom + 30}" text-anchor="middle" '
                   f"{FONT}>{_esc(x_label)}</text>")
    for g, name in enumerate(groups):
        y0 = top + g * group_h
        out.append(f'<text x="{left - 6}" y="{y0 + group_h / 2 + 2:.1f}" text-anchor="end" '
                   f"{FONT}>{_esc(name)}</text>")
        for k, ys in enumerate(series.values()):
            v = ys[g] if g < len(ys) else None
            if v is None:
                continue
            a, b = sorted((px(0.0), px(v)))
            out.append(f'<rect x="{a:.1f}" y="{y0 + k * bar_h:.1f}" width="{max(b - a, 1):.1f}" '
                       f'height="{bar_h - 1}" fill="{COLORS[k % len(COLORS)]}">'
                       f"<title>{_esc(name)}: {v:.4g}</title></rect>")
    out.append(f'<line x1="{px(0.0):.1f}" x2="{px(0.0):.1f}" y1="{top}" y2="{bottom}" '
               f'stroke="#333"/>')
    out += _legend(list(series), left + pw + 14, top + 12)
    out.append("</svg>")
    return "\n".join(out)
