"""The rules every lifetime-ledger event must keep, checked by whoever writes or reads one.

PostgreSQL checks them in its own functions (`scripts/ledger-postgres.sql`) before it writes an
event; the folder store checks them before it appends; and every reader checks the whole log
again, so an event that breaks one (a number that is not finite, a second reservation of one
release id, people or an end for a release that was not reserved) makes the ledger refuse to
answer rather than count it.
"""

from __future__ import annotations

import math
import re
from typing import Any

from selpe_audit.errors import UserError

KINDS = ("dataset", "reserve", "people", "measuring", "end", "raise")
_RID = re.compile(r"[0-9a-f]{12}")
#: per reserved release id: its reservation's numbers and the steps it has taken
Releases = dict[str, dict[str, Any]]


class BrokenLedger(ValueError):
    """An event breaks the ledger's rules (the message says which event and how)."""


def is_number(x: Any, upper: float = math.inf) -> bool:
    """A real number in [0, upper) - never a string, a bool, NaN or infinity."""
    return (isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
            and 0 <= x < upper)


def _is_cap(x: Any) -> bool:
    """A dataset's epsilon cap: above 0; infinite only for experiments on public data
    (`Installation.for_experiments`, which code alone can ask for)."""
    return (is_number(x) and x > 0) or x == math.inf


def check_events(events: list[dict[str, Any]]) -> None:
    """Raise `BrokenLedger` at the first event that breaks a rule."""
    datasets: set[str] = set()
    releases: Releases = {}
    for i, e in enumerate(events):
        why = _broken(e, datasets, releases)
        if why:
            raise BrokenLedger(f"event {i + 1} ({str(e.get('kind'))[:20]!r}) {why}"
                               if isinstance(e, dict) else f"event {i + 1} is not an object")


def _broken(e: Any, datasets: set[str], releases: Releases) -> str | None:
    """Why ``e`` may not follow the events before it (None: it may); updates the state."""
    if not isinstance(e, dict) or e.get("kind") not in KINDS:
        return "is of no kind the ledger knows"
    kind = e["kind"]
    if kind == "dataset":
        return _dataset(e, datasets)
    if kind == "raise":
        return _raise(e, datasets)
    rid = e.get("rid")
    if not isinstance(rid, str) or not _RID.fullmatch(rid):
        return "has no release id"
    if kind == "reserve":
        return _reserve(e, rid, datasets, releases)
    r = releases.get(rid)
    if r is None:
        return "is for a release that was not reserved"
    if "end" in r:
        return "follows the release's end"
    return _RELEASE_STEPS[kind](e, r)


def _dataset(e: dict[str, Any], datasets: set[str]) -> str | None:
    if not isinstance(e.get("dataset"), str) or e["dataset"] in datasets:
        return "names no dataset, or one already created"
    if not (_is_cap(e.get("lifetime_epsilon")) and is_number(e.get("lifetime_delta"), 1)):
        return "gives caps that are not positive numbers"
    datasets.add(e["dataset"])
    return None


def _raise(e: dict[str, Any], datasets: set[str]) -> str | None:
    caps = (e.get("lifetime_epsilon"), e.get("lifetime_delta"))
    if e.get("dataset") not in datasets or not all(isinstance(c, dict) for c in caps):
        return "raises a dataset the ledger does not hold"
    if not (_is_cap(caps[0].get("to")) and is_number(caps[1].get("to"), 1)):
        return "raises to caps that are not positive numbers"
    return None


def _reserve(e: dict[str, Any], rid: str, datasets: set[str],
             releases: Releases) -> str | None:
    if rid in releases:
        return "reserves a release id twice"
    if e.get("dataset") not in datasets:
        return "reserves for a dataset the ledger did not create"
    if not (is_number(e.get("epsilon")) and e["epsilon"] > 0
            and is_number(e.get("delta", 0.0), 1)):
        return "reserves an epsilon or delta that is not a finite number above 0"
    releases[rid] = {"epsilon": e["epsilon"], "delta": e.get("delta", 0.0)}
    return None


def _people(e: dict[str, Any], r: dict[str, Any]) -> str | None:
    if "people" in r or "measuring" in r:
        return "charges a release's people twice, or after its first mechanism"
    if not (isinstance(e.get("people"), int) and e["people"] >= 0):
        return "counts no people"
    r["people"] = True
    return None


def _measuring(e: dict[str, Any], r: dict[str, Any]) -> str | None:
    if "measuring" in r or "people" not in r:
        return "starts a release twice, or before its people were charged"
    r["measuring"] = True
    return None


def _end(e: dict[str, Any], r: dict[str, Any]) -> str | None:
    status = e.get("status")
    if status not in ("released", "aborted") or (status == "released"
                                                  and "measuring" not in r):
        return "ends a release neither released after its mechanisms nor aborted"
    for what, upper in (("epsilon", math.inf), ("delta", 1.0)):
        if what in e and not (is_number(e[what], upper)
                              and e[what] <= r[what] * (1 + 1e-9) + 1e-300):
            return f"spends a {what} that is not a finite number within the reservation"
    r["end"] = True
    return None


#: a reserved release's later events, each checked against what the release did before
_RELEASE_STEPS = {"people": _people, "measuring": _measuring, "end": _end}


def checked(events: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    """``events`` if they keep every rule of `release.ledger_rules`; else one line."""
    try:
        check_events(events)
    except BrokenLedger as e:
        raise UserError(f"{where}: the lifetime ledger refuses to answer: {e}; nothing is "
                        "counted from a ledger that breaks its rules (ask the administrator, "
                        "or restore it from backup)") from None
    return events
