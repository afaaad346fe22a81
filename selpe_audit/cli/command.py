"""The shape of a ``selpe-audit`` subcommand, shared by every stage package.

Stages register commands through the ``selpe_audit.commands`` entry-point group (see
pyproject.toml), so the shared core never imports a stage package: the air gap between
``release`` and ``decode`` is visible in the import graph, not just in the docs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    """A subcommand: its name and words for --help, its arguments, and what it runs."""

    name: str
    help: str
    description: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
