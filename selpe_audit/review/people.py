"""The review page's people section: the visits per person and the step tables of an
artifact with person structure (`selpe_audit.artifact.persons_block`), as bar charts of
their noisy counts, with what the cap leaves out said in words."""

from __future__ import annotations

from typing import Any

from selpe_audit.artifact.persons_block import NONE, PeopleTable, PersonsBlock
from selpe_audit.artifact.view import ReleaseView
from selpe_audit.review.charts import Chart, Column, count_cell
from selpe_audit.review.charts import escape_text as _e
from selpe_audit.review.markup import count_chart, section
from selpe_audit.review.view import flag_limits


def people_section(view: ReleaseView) -> str:
    """The section, or nothing for an artifact without people tables."""
    block = view.persons
    if block is None:
        return ""
    cap = block.cap
    parts = [
        f"<p>Each person's visits, in the order of <span class=\"mono\">{_e(block.order)}"
        f"</span>, are read up to the first {cap}: the visits-per-person count's last bar "
        f"reads &ldquo;{cap} or more&rdquo;, and the step tables hold each person's first "
        "step: the first visit and what follows it (the second visit, or none; the none "
        "column has a scale of its own). Person fields: "
        f"{_e(', '.join(block.person_fields) or 'none')}; never decreasing: "
        f"{_e(', '.join(block.nondecreasing) or 'none')}. Every count is one OpenDP "
        "measurement of its own (the ledger's persons/ entries).</p>",
        "<h3>Visits per person</h3>" + _visits_chart(view, block)]
    for field, table in (block.next or {}).items():
        parts.append(f"<h3>Steps: <span class=\"mono\">{_e(field)}</span> at a visit "
                     "&times; the next visit</h3>" + _step_chart(view, f"steps {field}", table))
    if block.gaps is not None:
        parts.append("<h3>Steps: the gap to the next visit</h3>"
                     + _step_chart(view, "gaps", block.gaps))
    if block.next is None:
        parts.append('<p class="muted">No step tables: the plan found the table too small '
                     "for them (see the plan); decode pairs visits by the visits per person "
                     "alone.</p>")
    return section("people", "People (visits per person and steps)", "".join(parts))


def _visits(v: Any, cap: int) -> str:
    return f"{v} or more visits" if v == cap else f"{v} visit{'s' if v != 1 else ''}"


def _visits_chart(view: ReleaseView, block: PersonsBlock) -> str:
    """One row per visits count, one column per combination of the person fields."""
    t = block.visits
    columns: dict[str, dict[Any, Any]] = {}
    for key, count in zip(t.keys, t.dp_counts, strict=True):
        *person, visits = key
        head = " · ".join(f"{f} {v}" for f, v in zip(t.fields, person, strict=False))
        columns.setdefault(head or "people", {})[visits] = count
    counts = range(1, block.cap + 1)
    return count_chart(view, "visits per person", [_visits(v, block.cap) for v in counts],
                       t.mechanism_id, [(h, [c.get(v) for v in counts])
                                        for h, c in columns.items()])


def _step_chart(view: ReleaseView, title: str, t: PeopleTable) -> str:
    """One row per value of the table's first key, one column per value of its last; the
    ``none`` column (people with one visit: most of them) on a scale of its own, so the
    steps' bars stay readable."""
    rows: dict[Any, dict[Any, Any]] = {}
    heads: list[Any] = []
    for (first, last), count in zip(t.keys, t.dp_counts, strict=True):
        rows.setdefault(first, {})[last] = count
        if last not in heads:
            heads.append(last)
    floor, scale = flag_limits(view, t.mechanism_id, None)
    columns = []
    for h in heads:
        values = [rows[r].get(h) for r in rows]
        own = None
        if h == NONE:
            nums = [float(v) for v in values if isinstance(v, int | float)]
            own = (min([0.0, *nums]), max([1.0, *nums]))
        columns.append(Column(f"{t.fields[-1]} {h}",
                              [count_cell(v, floor, scale) for v in values], own))
    chart = Chart(title, [f"{t.fields[0]} {r}" for r in rows], columns)
    return f'<div class="chartbox">{chart.svg()}</div>'
