"""RESULTS.md as a page a person reads in two minutes, from RESULTS.json (the raw numbers).

Per benchmark: one line saying how and when it ran, its one-line ``summary`` and one short
markdown ``table`` - its `Benchmark` record's, else the result's own (a retired study's are
baked into its entry) - and links to SVG plots written to ``plots/`` beside the page. No JSON
in the page: every number stays in RESULTS.json.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.suite import STUDIES, Benchmark, benchmark


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _machine(entries: dict[str, dict[str, Any]]) -> tuple[str, str]:
    """(the machine every section shares, without the commit; the range of dates)."""
    machines = {re.sub(r",? commit \w+$", "", e.get("machine", "")) for e in entries.values()}
    dates = sorted(e.get("date", "") for e in entries.values())
    span = dates[0] if dates[0] == dates[-1] else f"{dates[0]} to {dates[-1]}"
    return "; ".join(sorted(machines)), span


def _rendered(render: Callable[[Any], Any] | None, r: dict[str, Any]) -> Any:
    """What a record's renderer makes of ``r``; None where it has none or the result lacks a
    number it reads (an older result's shape)."""
    if render is None:
        return None
    try:
        return render(r)
    except (KeyError, TypeError, ValueError, IndexError):
        return None


def section(name: str, entry: dict[str, Any], plots: list[tuple[str, str]],
            bench: Benchmark | None = None) -> list[str]:
    """The lines of one benchmark's section (``plots``: (caption, relative path); ``bench``:
    its record, None for a retired study)."""
    r = entry["result"]
    commit = re.search(r"commit (\w+)", entry.get("machine", ""))
    lines = [f"## {name}", "",
             f"`{entry['command']}` · {entry['date']} · {entry['seconds']:.0f} s"
             + (f" · commit {commit.group(1)}" if commit else ""), ""]
    if "retired" in entry:  # a decided study: its code is gone, its last numbers stay
        lines += [f"**Retired** {_one_line(entry['retired'])}.", ""]
    if "error" in r:
        return [*lines, f"**Failed:** {_one_line(str(r['error']))}", ""]
    if "last_failure" in entry:
        f = entry["last_failure"]
        lines += [f"**The last run failed** ({f['date']}): {_one_line(str(f['error']))}; the "
                  "numbers below are from the run before.", ""]
    summary = r.get("summary") if isinstance(r.get("summary"), str) else None
    summary = summary or _rendered(bench.summary if bench else None, r)
    if summary:
        lines += [_one_line(summary), ""]
    table = _rendered(bench.table if bench else None, r)
    if table is None and isinstance(r.get("table"), str):
        table = r["table"]
    if table:
        lines += [table.strip(), ""]
    if plots:
        lines += [" ".join(f"![{c}]({p})" for c, p in plots), ""]
    return lines


def write_page(path: Path, entries: dict[str, dict[str, Any]]) -> None:
    """RESULTS.md at ``path`` and its plots in ``path.parent / "plots"``: the studies in the
    suite's order, then the retired ones."""
    plot_dir = path.parent / "plots"
    machine, span = _machine(entries) if entries else ("", "")
    names = [n for n in STUDIES if n in entries] + [n for n in entries if n not in STUDIES]
    lines = ["# Benchmark results", "",
             f"Measured on {machine}, {span}. Regenerate with `python -m benchmarks` (every "
             "benchmark), `--only NAME[,NAME]` (some) or `--render` (this page and its plots "
             "from RESULTS.json, no run). Generated: do not edit by hand. Every number, "
             "including those not shown here, is in [RESULTS.json](RESULTS.json).", "",
             "Sections: " + ", ".join(f"[{n}](#{n})" for n in names), ""]
    for name in names:
        bench = benchmark(name) if name in STUDIES else None
        links = []
        if "error" not in entries[name]["result"] and bench is not None:
            for stem, caption, svg in _rendered(bench.plots, entries[name]["result"]) or []:
                plot_dir.mkdir(parents=True, exist_ok=True)
                (plot_dir / f"{name}-{stem}.svg").write_text(svg + "\n", encoding="utf-8")
                links.append((caption, f"plots/{name}-{stem}.svg"))
        lines += section(name, entries[name], links, bench)
    path.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")


def write_results(path: Path, entries: dict[str, dict[str, Any]]) -> None:
    """RESULTS.json beside ``path``, then the page at ``path`` rendered from it."""
    path.with_suffix(".json").write_text(json.dumps(entries, indent=2, default=str) + "\n")
    write_page(path, entries)
