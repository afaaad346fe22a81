"""One registry type for every extension point (modes, decoders, audit kinds).

A registry maps names to entries under one rule: a name is registered once, and a second
registration is a `DuplicateName` naming both places, so a plugin can never silently replace
a built-in (or another plugin). Its built-ins are modules named here by their import path,
each registering its own entry when imported; plugins are modules named in an entry-point
group. `Registry.load_builtins` imports both, once, and every lookup calls it first, so a
built-in is found whichever module is imported first - and no module is imported for its
side effect alone.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Generic, TypeVar

from selpe_audit.errors import UserError

T = TypeVar("T")


class DuplicateName(UserError):
    """A name registered twice: two modes, decoders or kinds would answer to it."""


@dataclass(frozen=True)
class _Entry(Generic[T]):
    value: T
    module: str  # the registering module: built-ins are ordered by it
    place: str  # module, function and line, for the duplicate's message


class Registry(Generic[T]):
    """Names to entries of one kind (``what``: "selection mode", "decoder", ...), in
    registration order with the built-ins first, in the order ``builtins`` names their
    modules. ``group``: the entry-point group of plugins, loaded after the built-ins."""

    def __init__(self, what: str, builtins: tuple[str, ...] = (), group: str | None = None):
        self.what, self.builtins, self.group = what, builtins, group
        self._entries: dict[str, _Entry[T]] = {}
        self._loaded = not builtins and group is None

    def add(self, name: str, value: T, *, stacklevel: int = 1) -> T:
        """Register ``value`` as ``name``; `DuplicateName` if the name is taken.
        ``stacklevel``: the caller that counts as the place (1: the caller of `add`; a
        module's own ``register`` wrapper passes 2, as `warnings.warn` does)."""
        frame = sys._getframe(stacklevel)
        module = str(frame.f_globals.get("__name__", "?"))
        qualname = frame.f_code.co_qualname
        where = module if qualname == "<module>" else f"{module}.{qualname}"
        place = f"{where} (line {frame.f_lineno})"
        known = self._entries.get(name)
        if known is not None:
            raise DuplicateName(f"{self.what} '{name}' is registered twice: first by "
                                f"{known.place}, then by {place}")
        self._entries[name] = _Entry(value, module, place)
        return value

    def load_builtins(self) -> None:
        """Import the built-in modules, then the plugins (once; each registers itself)."""
        if self._loaded:
            return
        self._loaded = True
        for module in self.builtins:
            importlib.import_module(module)
        rank = {m: i for i, m in enumerate(self.builtins)}  # whichever was imported first
        self._entries = dict(sorted(self._entries.items(),
                                    key=lambda kv: rank.get(kv[1].module, len(rank))))
        for ep in entry_points(group=self.group) if self.group else ():
            try:
                ep.load()
            except Exception as e:  # a broken plugin must not look like our traceback
                raise UserError(f"{self.what} plugin '{ep.name}' ({ep.value}) failed to load: "
                                f"{type(e).__name__}: {e}; fix or uninstall it") from None

    def find(self, name: object) -> T | None:
        """The entry called ``name``, or None (also for a name that is not a string)."""
        self.load_builtins()
        entry = self._entries.get(name) if isinstance(name, str) else None
        return None if entry is None else entry.value

    def get(self, name: str) -> T:
        """The entry called ``name``; a one-line ValueError naming the known ones otherwise."""
        value = self.find(name)
        if value is None:
            raise ValueError(f"unknown {self.what} '{name}'; choose one of "
                             f"{', '.join(self.names())}")
        return value

    def names(self) -> tuple[str, ...]:
        self.load_builtins()
        return tuple(self._entries)

    def values(self) -> tuple[T, ...]:
        self.load_builtins()
        return tuple(e.value for e in self._entries.values())

    def items(self) -> tuple[tuple[str, T], ...]:
        self.load_builtins()
        return tuple((n, e.value) for n, e in self._entries.items())

    def __contains__(self, name: object) -> bool:
        return self.find(name) is not None
