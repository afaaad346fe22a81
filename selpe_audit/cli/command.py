"""The shape of a ``selpe-audit`` subcommand, shared by every stage package.

Stages register commands through the ``selpe_audit.commands`` entry-point group (see
pyproject.toml), so the shared core never imports a stage package: the air gap between
``release`` and ``decode`` is visible in the import graph, not just in the docs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from selpe_audit.errors import NotAvailableYet


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    description: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def not_available(name: str, what: str, issue: int) -> Callable[[argparse.Namespace], int]:
    """A handler for a stage that has not been built yet: says so and exits non-zero."""

    def run(_: argparse.Namespace) -> int:
        raise NotAvailableYet(f"'selpe-audit {name}' is not available yet: {what} has not "
                              f"been built (tracked in issue #{issue})")

    return run


def no_arguments(_: argparse.ArgumentParser) -> None:
    return None
