"""A rich progress bar for candidate generation: count, records/s of this run, validity."""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class GenerationProgress:
    """``with GenerationProgress(console, total, done) as bar: bar.advance(validity)``, or
    ``bar.update(done)`` where another process makes the records."""

    def __init__(self, console: Console, total: int, done: int,
                 label: str = "candidates") -> None:
        self._progress = Progress(
            TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[rate]} records/s"),
            TextColumn("valid {task.fields[validity]}"),
            TimeElapsedColumn(), TimeRemainingColumn(), console=console)
        self._task = self._progress.add_task("decode", total=total, completed=done,
                                             rate="-", validity="-")
        self._made = 0
        self._done = done
        self._t0 = time.perf_counter()

    def __enter__(self) -> GenerationProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def advance(self, validity: float) -> None:
        """One more candidate; ``validity`` is the decoder's share of valid generations."""
        self._made += 1
        rate = self._made / max(time.perf_counter() - self._t0, 1e-9)
        self._progress.update(self._task, advance=1, rate=f"{rate:.3g}",
                              validity=f"{validity:.0%}")

    def skip(self, count: int) -> None:
        """``count`` candidates found made (a resumed checkpoint): counted, not timed."""
        if count:
            self._done += count
            self._progress.update(self._task, advance=count)

    def update(self, done: int) -> None:
        """Set the count to ``done`` (a Ray job's driver reads it from the shards'
        checkpoints); validity is the workers' own and is not shown."""
        self._made = max(0, done - self._done)
        rate = self._made / max(time.perf_counter() - self._t0, 1e-9)
        self._progress.update(self._task, completed=done, rate=f"{rate:.3g}")
