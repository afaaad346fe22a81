"""The review page's HTML building blocks: escaped tables and sections, a counts chart,
personal-data highlighting, and the self-contained page shell with its CSP (no script, no
network), shared by the page's section renderers (`review.page`) and the audit report."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from selpe_audit.artifact.view import ReleaseView
from selpe_audit.review.charts import Chart, Column, count_cell
from selpe_audit.review.charts import escape_text as _e
from selpe_audit.review.view import flag_limits, fmt_value, personal_data_hits

_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'"


def short(x: Any) -> str:
    """A number for a summary tile: floats to 3 significant digits."""
    return f"{x:.3g}" if isinstance(x, float) else fmt_value(x)


def to_json(x: Any) -> str:
    """A released value as the page shows it: JSON, keys sorted, non-ASCII kept."""
    return json.dumps(x, ensure_ascii=False, sort_keys=True)


def count_chart(view: ReleaseView, title: str, rows: list[str], mechanism_id: str | None,
                columns: list[tuple[str, Sequence[Any]]], scale: float | None = None) -> str:
    """Counts as bars; flagged against ``scale`` (a marginal's stddev) when given, else the
    ledger's noise scale of ``mechanism_id``."""
    floor, scale = flag_limits(view, mechanism_id, scale)
    chart = Chart(title, rows, [Column(h, [count_cell(v, floor, scale) for v in vals])
                                for h, vals in columns])
    return f'<div class="chartbox">{chart.svg()}</div>'


def table(head: list[str], rows: Iterable[list[str]], cls: str = "") -> str:
    """Cells are already-escaped HTML."""
    h = "".join(f"<th>{c}</th>" for c in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>'


def kv_table(pairs: Iterable[tuple[str, Any]]) -> str:
    """A two-column key/value table; keys and values are escaped here."""
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(fmt_value(v))}</td></tr>" for k, v in pairs)
    return f'<table class="kv"><tbody>{rows}</tbody></table>'


def section(sid: str, title: str, body: str) -> str:
    """One page section, its id the navigation's anchor; title and body are HTML."""
    return f'<section id="{sid}"><h2>{title}</h2>{body}</section>'


def flagged(value: Any) -> str:
    """Escaped text, highlighted when it looks like personal data."""
    text = value if isinstance(value, str) else to_json(value)
    hits = personal_data_hits(text)
    if not hits:
        return _e(text)
    why = "; ".join(f"looks like a {p}" for p, _ in hits)
    return f'<span class="pii" title="{_e(why)}">{_e(text)}</span>'


def html_page(title: str, style: str, body: str) -> str:
    """A whole self-contained page: no script, no network (the CSP forbids both), the
    stylesheet inline; ``title`` is escaped here, ``body`` must be escaped HTML already."""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        '<meta name="referrer" content="no-referrer">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>{_e(title)}</title><style>{style}</style></head><body>{body}</body></html>\n")
