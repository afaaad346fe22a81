"""The command line a benchmark module shares: ``--quick``, ``--json FILE``, and its table
and summary printed at the end."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def parser(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser described by the module docstring's first line."""
    p = argparse.ArgumentParser(description=(doc or "").split("\n")[0])
    p.add_argument("--quick", action="store_true", help="reduced sizes (the CI smoke run)")
    p.add_argument("--json", type=Path, help="also write every number to this file")
    return p


def finish(result: dict[str, Any], path: Path | None) -> None:
    """Print the result's table and summary; write it all to ``path`` when given."""
    print(result["table"])
    print(result["summary"])
    if path:
        path.write_text(json.dumps(result, indent=1))


def main(doc: str | None, run: Callable[[bool], dict[str, Any]]) -> None:
    """A module whose ``run`` takes only ``quick``: its whole command line."""
    a = parser(doc).parse_args()
    finish(run(a.quick), a.json)
