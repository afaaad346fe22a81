"""Modes of other packages, found through entry points.

A package adds a selection or counts mode by naming, in an entry-point group, a module that
registers the mode when imported. The enclave imports them after its built-in modes.
"""

from __future__ import annotations

from importlib.metadata import entry_points

from selpe_audit.errors import UserError


def load_plugins(group: str, what: str) -> None:
    """Import every module named in entry-point ``group``; a plugin that fails to load is a
    one-line `UserError` naming it (``what``: "selection mode", "counts mode")."""
    for ep in entry_points(group=group):
        try:
            ep.load()
        except Exception as e:  # a broken plugin must not look like our traceback
            raise UserError(f"{what} plugin '{ep.name}' ({ep.value}) failed to load: "
                            f"{type(e).__name__}: {e}; fix or uninstall it") from None
