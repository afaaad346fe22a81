"""The suite: one `Benchmark` record per study module, and one registry of them (the page's
order). A study's module exports ``BENCHMARK``; the runner and the page read only that, so
what a study runs and how its section of RESULTS.md reads live together."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Result = dict[str, Any]
Plot = tuple[str, str, str]  # (file stem, caption, svg text)

#: every live study, in the page's order (retired ones keep only their numbers in RESULTS.json)
STUDIES = ("small_tables", "release_time", "person_ledger", "counts", "selection",
           "selection_modes", "counts_modes", "triage", "decode", "shards", "scale",
           "generation", "database", "audits", "api", "persons")


@dataclass(frozen=True)
class Benchmark:
    """One study: ``run(quick)`` measures and returns its result (JSON-ready); ``table``,
    ``summary`` and ``plots`` render its section from a result (None: the result's own
    ``table`` and ``summary`` strings, no plot)."""

    name: str
    run: Callable[..., Result]
    table: Callable[[Result], str] | None = None
    summary: Callable[[Result], str] | None = None
    plots: Callable[[Result], list[Plot]] | None = None

    @property
    def command(self) -> str:
        """The command that reruns it alone (its own options: ``--set NAME=VALUE``, the
        keyword arguments of its ``run``)."""
        return f"python -m benchmarks --only {self.name}"


def benchmark(name: str) -> Benchmark:
    """The study's record; imports its module only now, so a run loads what it runs."""
    if name not in STUDIES:
        raise KeyError(f"unknown benchmark {name!r}; choose from {', '.join(STUDIES)}")
    return importlib.import_module(f"benchmarks.{name}").BENCHMARK


def fmt(x: Any, places: int = 3) -> str:
    """A number for a table cell ("-" for none)."""
    return "-" if x is None else f"{x:.{places}f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A markdown table."""
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
                      *("| " + " | ".join(str(c) for c in r) + " |" for r in rows)])
