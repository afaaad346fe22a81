"""The privacy ledger of one release, and the lifetime ledger that charges people.

The lifetime ledger is an append-only log of events in a store (`release.ledger_store`: a
folder, or PostgreSQL where the steward may only insert). A release reserves its (epsilon,
delta) against its dataset's caps *before* reading any row; after reading, before any
mechanism, it charges the people in its rows (`release.ledger_people`): each is matched to
the people earlier releases charged, whatever dataset or extract they were in, and a
release that would take any one of them past the lifetime cap is refused with one line
saying how many (never who) - or, asked to, leaves those people out before any mechanism
runs (individual privacy accounting). It records when its first mechanism starts, and
how it ended.

Everything is computed from the events, and a reservation counts for the epsilon and delta
it reserved (the most the release may spend) unless it was aborted *before* its first
mechanism: a steward who can append cannot refund a release that ran. The caps of a
dataset are fixed by its first release and raised only by a signed ``ledger raise``; no cap
passes the installation's maximum (`release.installation`), which is also every person's
lifetime cap.
"""

from __future__ import annotations

import json
import math
import os
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import polars as pl
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from release.database import is_database_url
from release.installation import (
    DEFAULT_MAX_DELTA,
    DEFAULT_MAX_EPSILON,
    Installation,
    load_installation,
)
from release.ledger_people import (
    NO_LINKAGE_TO_LEAVE_OUT,
    People,
    histories,
    over_by_content,
    over_cap,
    person_keys,
    spends,
    with_release,
)
from release.ledger_store import LedgerStore, now, open_store
from selpe_audit.artifact.signing import key_id, load_private_key, load_public_key
from selpe_audit.errors import UserError
from selpe_audit.schema import Schema

LEDGER_ENV = "SELPE_AUDIT_LEDGER"  # the installation's ledger folder (absolute)
FIXED_ENV = "SELPE_AUDIT_LEDGER_FIXED"  # "1": no setting may point a release elsewhere
SYSTEM_LEDGER = Path("/var/lib/selpe-audit/ledger")
DEFAULT_LIFETIME_EPSILON = DEFAULT_MAX_EPSILON  # a new ledger's caps with no installation file
DEFAULT_LIFETIME_DELTA = DEFAULT_MAX_DELTA
_RAISE_DOMAIN = "selpe-audit/ledger-raise/1"


def ledger_is_fixed() -> bool:
    """Whether the installation (the enclave image) forbids any other ledger folder."""
    return os.environ.get(FIXED_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def default_ledger_folder() -> Path:
    """One absolute folder per installation, whatever the working directory.

    ``$SELPE_AUDIT_LEDGER`` if set (the image sets it); else the system folder if it exists
    or can be created (an existing one is used even when this user cannot write it, so a
    second user cannot start a fresh budget by falling back); else the user's data folder.
    """
    env = os.environ.get(LEDGER_ENV, "").strip()
    if env:
        path = Path(env).expanduser()
        if not path.is_absolute():
            raise UserError(f"{LEDGER_ENV} must be an absolute folder path")
        return path
    if SYSTEM_LEDGER.exists() or _can_create(SYSTEM_LEDGER):
        return SYSTEM_LEDGER
    xdg = os.environ.get("XDG_DATA_HOME", "").strip()
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share"
    return base / "selpe-audit" / "ledger"


def _can_create(folder: Path) -> bool:
    parent = next((p for p in folder.parents if p.exists()), None)
    return parent is not None and parent.is_dir() and os.access(parent, os.W_OK | os.X_OK)


def ledger_folder(configured: str | Path | None,
                  installation: Installation | None = None) -> Path | str:
    """Where a release charges: the installation's ledger when its file names one (then any
    other folder, URL or ``$SELPE_AUDIT_LEDGER`` is refused: another would be a fresh
    budget); else the configured folder (made absolute) or the default one, which the
    installation may also fix (``SELPE_AUDIT_LEDGER_FIXED=1``)."""
    inst = installation or load_installation()
    if inst.ledger is not None:
        named = inst.ledger
        for what, other in (("budget.lifetime_ledger / --lifetime-ledger", configured),
                            (LEDGER_ENV, os.environ.get(LEDGER_ENV, "").strip() or None)):
            if other is not None and str(other) != "" and not _same(other, named):
                raise UserError(f"config: the installation ({inst.source}) names the lifetime "
                                f"ledger; remove {what}, which points elsewhere")
        return named
    default = default_ledger_folder()
    if configured is None or str(configured) == "":
        return default
    if is_database_url(str(configured)):
        raise UserError("config: a PostgreSQL lifetime ledger is named by the administrator's "
                        "installation file ([ledger] url), never by a release setting")
    chosen = Path(configured).expanduser().absolute()
    if ledger_is_fixed() and os.path.realpath(chosen) != os.path.realpath(default):
        raise UserError(f"config: this installation fixes the lifetime ledger folder "
                        f"({FIXED_ENV}); remove budget.lifetime_ledger / --lifetime-ledger")
    return default if ledger_is_fixed() else chosen


def _same(a: str | Path, b: str | Path) -> bool:
    if is_database_url(str(a)) or is_database_url(str(b)):
        return str(a) == str(b)
    return os.path.realpath(Path(a).expanduser()) == os.path.realpath(Path(b).expanduser())


@dataclass
class Reservation:
    """One release as the events tell it."""

    rid: str
    number: int  # its place among every reservation of the ledger (a history bit)
    dataset: str
    epsilon: float
    delta: float
    started: str
    note: str
    measuring: bool = False
    end: dict[str, Any] | None = None
    people: dict[str, Any] | None = None

    @property
    def status(self) -> str:
        if self.end is not None:
            return str(self.end["status"])
        return "measuring" if self.measuring else "reserved"

    @property
    def counts(self) -> bool:
        """Whether it is charged: always, unless aborted before its first mechanism."""
        return not (self.status == "aborted" and not self.measuring)

    def charged(self) -> tuple[float, float]:
        """What it counts for: what it reserved (the most it may spend), or nothing."""
        return (self.epsilon, self.delta) if self.counts else (0.0, 0.0)


@dataclass
class State:
    """The ledger as its events tell it: each dataset's caps and raises, every release."""

    caps: dict[str, tuple[float, float]] = field(default_factory=dict)
    created: dict[str, str] = field(default_factory=dict)
    raises: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    releases: dict[str, Reservation] = field(default_factory=dict)

    @classmethod
    def of(cls, events: list[dict[str, Any]]) -> State:
        s = cls()
        for e in events:
            kind = e.get("kind")
            if kind == "dataset":
                s.caps.setdefault(e["dataset"], (float(e["lifetime_epsilon"]),
                                                 float(e["lifetime_delta"])))
                s.created.setdefault(e["dataset"], str(e.get("at", "")))
            elif kind == "reserve" and e["rid"] not in s.releases:
                s.releases[e["rid"]] = Reservation(
                    e["rid"], len(s.releases), e["dataset"], float(e["epsilon"]),
                    float(e.get("delta", 0.0)), str(e.get("at", "")), str(e.get("note", "")))
            elif kind in ("measuring", "end", "people") and e.get("rid") in s.releases:
                r = s.releases[e["rid"]]
                if kind == "measuring":
                    r.measuring = True
                elif kind == "end" and r.end is None:
                    r.end = e
                elif kind == "people" and r.people is None:
                    r.people = e
            elif kind == "raise" and e.get("dataset") in s.caps:
                old = s.caps[e["dataset"]]
                new = (float(e["lifetime_epsilon"]["to"]), float(e["lifetime_delta"]["to"]))
                s.caps[e["dataset"]] = (max(old[0], new[0]), max(old[1], new[1]))
                s.raises.setdefault(e["dataset"], []).append(e)
        return s

    def committed(self, dataset: str) -> tuple[float, float]:
        live = [r.charged() for r in self.releases.values() if r.dataset == dataset]
        return sum(e for e, _ in live), sum(d for _, d in live)

    def per_release(self) -> tuple[list[float], list[float]]:
        """Every release's charged (epsilon, delta), by its number."""
        ordered = sorted(self.releases.values(), key=lambda r: r.number)
        return [r.charged()[0] for r in ordered], [r.charged()[1] for r in ordered]


@dataclass(frozen=True)
class PeopleCharge:
    """What charging a release's people found: which rows stay (``keep``), how many people
    were charged, how many left out (their cap reached), and the highest spend among them
    before this release."""

    keep: np.ndarray
    people: int
    left_out: int
    highest_before: float


class LifetimeLedger:
    """The lifetime ledger at ``location`` (a folder or a postgresql:// URL) as one dataset's
    releases see it. ``lifetime_epsilon``/``lifetime_delta`` are this release's settings:
    the caps of a new dataset, at most the stored caps of an existing one (None: the stored
    caps, or the installation's maximum for a new dataset); no cap in force exceeds the
    installation's maximum (default: `load_installation`), every person's lifetime cap."""

    def __init__(self, location: str | Path, dataset: str,
                 lifetime_epsilon: float | None = None, lifetime_delta: float | None = None,
                 installation: Installation | None = None,
                 store: LedgerStore | None = None) -> None:
        self.installation = installation or load_installation()
        named = self.installation.ledger
        pinned = named is not None and _same(location, named)
        self.store = store or open_store(location,
                                         self.installation.ledger_id if pinned else None)
        self.dataset = dataset
        self.lifetime_epsilon = lifetime_epsilon
        self.lifetime_delta = lifetime_delta

    @property
    def where(self) -> str:
        return self.store.where

    def _state(self) -> State:
        return State.of(self._trusted_events())

    def _trusted_events(self) -> list[dict[str, Any]]:
        """The events, less any raise not signed by a key the installation trusts for raises
        (an appended record proves nothing by itself)."""
        keys = {key_id(k): k for k in (load_public_key(p)
                                       for p in self.installation.raise_keys)}
        out = []
        for e in self.store.events():
            if e.get("kind") == "raise":
                k = keys.get(str(e.get("by")))
                try:
                    if k is None:
                        continue
                    k.verify(bytes.fromhex(str(e.get("signature", ""))), _raise_payload(e))
                except (ValueError, InvalidSignature):
                    continue
            out.append(e)
        return out

    def _new_caps(self) -> tuple[float, float]:
        inst = self.installation
        return (inst.max_epsilon if self.lifetime_epsilon is None else self.lifetime_epsilon,
                inst.max_delta if self.lifetime_delta is None else self.lifetime_delta)

    def spent(self) -> tuple[float, float]:
        """The dataset's (epsilon, delta) committed: every release it charged."""
        return self._state().committed(self.dataset)

    def caps(self) -> tuple[float, float]:
        """The dataset's caps in force (a new one's would-be caps), at most the
        installation's maximum."""
        stored = self._state().caps.get(self.dataset) or self._new_caps()
        inst = self.installation
        return min(stored[0], inst.max_epsilon), min(stored[1], inst.max_delta)

    def person_caps(self) -> tuple[float, float]:
        """Every person's lifetime caps in force: the installation's maximum, lowered by this
        release's settings."""
        inst = self.installation
        return (min(inst.max_epsilon, self.lifetime_epsilon or math.inf),
                min(inst.max_delta, math.inf if self.lifetime_delta is None
                    else self.lifetime_delta))

    def _effective_caps(self, state: State) -> tuple[float, float]:
        """The dataset's caps in force, lowered (never raised) by this release's settings."""
        out = []
        stored_caps = state.caps.get(self.dataset) or self._new_caps()
        ceilings = (self.installation.max_epsilon, self.installation.max_delta)
        for asked, stored, ceiling, what in zip((self.lifetime_epsilon, self.lifetime_delta),
                                                stored_caps, ceilings, ("epsilon", "delta"),
                                                strict=True):
            if asked is not None and asked > stored * (1 + 1e-12):
                raise UserError(
                    f"dataset '{self.dataset}': its lifetime {what} {stored:g} is fixed in its "
                    f"ledger and a release cannot raise it (asked {asked:g}); use 'selpe-audit "
                    f"ledger raise --dataset {self.dataset}' or leave lifetime_{what} out; "
                    "no data was read")
            if asked is not None and asked > ceiling * (1 + 1e-12):
                raise UserError(
                    f"budget.lifetime_{what} {asked:g} exceeds {self.installation.where()}, "
                    f"{ceiling:g}; lower it or leave it out (only the administrator can raise "
                    "the maximum); no data was read")
            out.append(min(stored, ceiling, math.inf if asked is None else asked))
        return out[0], out[1]

    def reserve(self, epsilon: float, delta: float = 0.0, note: str = "") -> str:
        """Reserve (epsilon, delta) for a new release, or refuse if the dataset's lifetime
        budget would be exceeded; the first reservation fixes the dataset's caps."""
        with self.store.locked():
            state = self._state()
            cap_eps, cap_delta = self._effective_caps(state)
            spent_eps, spent_delta = state.committed(self.dataset)
            if spent_eps + epsilon > cap_eps + 1e-12:
                stored = (state.caps.get(self.dataset) or self._new_caps())[0]
                lowered = (f", lowered from {stored:g} by this release's lifetime_epsilon or "
                           f"{self.installation.where()}" if cap_eps < stored else "")
                raise UserError(
                    f"lifetime budget for dataset '{self.dataset}' would be exceeded: "
                    f"{spent_eps:g} spent + {epsilon:g} requested > {cap_eps:g}{lowered} "
                    f"(ledger {self.where}); no data was read")
            if delta and spent_delta + delta > cap_delta * (1 + 1e-9):
                raise UserError(
                    f"lifetime delta for dataset '{self.dataset}' would be exceeded: "
                    f"{spent_delta:g} spent + {delta:g} requested > {cap_delta:g} "
                    f"(ledger {self.where}); no data was read")
            return self.store.reserve(self.dataset, epsilon, delta, note, self._new_caps())

    def charge_people(self, rid: str, rows: pl.DataFrame, schema: Schema,
                      person_column: str | None, leave_out_exhausted: bool = False,
                      ) -> PeopleCharge:
        """After reading, before any mechanism: match the people in ``rows`` (a frame typed
        by ``schema``; a person is a value of ``person_column``, else a row) to every person
        the ledger charged, and charge them this release. Refused - the reservation given
        back, nothing spent - when a person would pass their lifetime cap, unless
        ``leave_out_exhausted``: then the rows of the people whom their *linkage fields*
        match to charged ones past their cap are dropped (``keep``), and a release in which
        record content alone matches someone past their cap is refused: whether a person is
        left out may depend on their own identity and spend only (individual privacy
        accounting), never on what other rows look like."""
        linkage = self.installation.linkage_fields(schema)
        if leave_out_exhausted and not linkage:
            self._refuse(rid, "leave-out without linkage fields", NO_LINKAGE_TO_LEAVE_OUT)
        people = person_keys(self.store.key(), rows, schema, person_column, self.store.link,
                             linkage)
        with self.store.locked():
            state = self._state()
            mine = state.releases[rid]
            past_cap, before = self._spends(state, mine)
            history = histories(people, self._charged(state, rid), len(state.releases))
            over = past_cap(history)
            n_over = int(over.sum())
            if n_over and leave_out_exhausted:
                by_identity = past_cap(histories(people, self._charged(state, rid),
                                                 len(state.releases), by_records=False))
                if (by_content := int((over & ~by_identity).sum())):
                    self._refuse(rid, "people over their cap by content",
                                 over_by_content(by_content, people.count))
            if n_over and not leave_out_exhausted:
                self._refuse(rid, "people over their lifetime cap", over_cap(
                    n_over, people.count, self.person_caps(), mine.epsilon, self.where))
            if n_over and n_over == people.count:
                self._refuse(rid, "every person over their cap",
                             f"every one of the {people.count} people in these rows has "
                             "reached their lifetime cap: nothing is left to release; no DP "
                             "mechanism ran")
            keep_people = ~over
            kept = people.subset(keep_people, with_release(history[keep_people], mine.number))
            self.store.charge(rid, kept)
        highest = float(before(history)[keep_people].max()) if kept.count else 0.0
        return PeopleCharge(keep_people[people.owners], kept.count, n_over, highest)

    def _charged(self, state: State, rid: str) -> Iterator[People]:
        """The people every other release charged, one extract in memory at a time."""
        return (self.store.people(r.people)
                for r in sorted(state.releases.values(), key=lambda r: r.number)
                if r.people is not None and r.rid != rid)

    def _spends(self, state: State, mine: Reservation) -> tuple[Callable, Callable]:
        """(who ``mine`` takes past their caps, each one's epsilon before it), by history."""
        eps_by, delta_by = state.per_release()
        eps_by[mine.number], delta_by[mine.number] = 0.0, 0.0  # this one, added below
        cap_eps, cap_delta = self.person_caps()

        def past_cap(history: np.ndarray) -> np.ndarray:
            return ((spends(history, eps_by) + mine.epsilon > cap_eps + 1e-12)
                    | (spends(history, delta_by) + mine.delta > cap_delta * (1 + 1e-9)))

        return past_cap, lambda history: spends(history, eps_by)

    def _refuse(self, rid: str, why: str, message: str) -> NoReturn:
        """End the reservation (before any mechanism: nothing spent) and refuse."""
        self.store.end(rid, "aborted", why=why)
        raise UserError(message)

    def start_measuring(self, rid: str) -> None:
        """Recorded before the release's first mechanism: from here on it cannot be
        refunded."""
        self.store.measuring(rid)

    def finish(self, rid: str, status: str, epsilon: float | None = None,
               delta: float | None = None) -> None:
        """How the release ended (``released``, or ``aborted``: refunded only before its
        first mechanism) and what it spent."""
        self.store.end(rid, status, epsilon, delta)

    def abort(self, rid: str) -> None:
        """Give a failed release's reservation back (refunded only before its first
        mechanism), unless it has ended already (refused people end it themselves)."""
        with self.store.locked():
            mine = self._state().releases.get(rid)
            if mine is not None and mine.end is None:
                self.store.end(rid, "aborted")

    def raise_caps(self, signing_key: str | Path, reason: str, epsilon: float | None = None,
                   delta: float | None = None) -> dict[str, Any]:
        """Raise the dataset's caps (at most to the installation's maximum), signed by a key
        the installation trusts for raises; records the key, when, why and the signature."""
        if not reason.strip():
            raise UserError("ledger raise: --reason must say why the cap is raised")
        key = self.raise_signer(signing_key)
        signer = key_id(key.public_key())
        with self.store.locked():
            state = self._state()
            if self.dataset not in state.caps:
                raise UserError(f"no lifetime ledger for dataset '{self.dataset}' in "
                                f"{self.where}; 'selpe-audit ledger show' lists them")
            old_eps, old_delta = state.caps[self.dataset]
            new_eps = old_eps if epsilon is None else epsilon
            new_delta = old_delta if delta is None else delta
            if not (math.isfinite(new_eps) and new_eps >= old_eps
                    and 0 <= new_delta < 1 and new_delta >= old_delta):
                raise UserError(f"ledger raise: the new caps must be at least the current ones "
                                f"(epsilon {old_eps:g}, delta {old_delta:g}), finite, delta < 1")
            if (new_eps, new_delta) == (old_eps, old_delta):
                raise UserError("ledger raise: give --epsilon or --delta above the current cap")
            inst = self.installation
            if new_eps > inst.max_epsilon or new_delta > inst.max_delta:
                raise UserError(f"ledger raise: epsilon {new_eps:g}, delta {new_delta:g} exceed "
                                f"{inst.where()}, epsilon {inst.max_epsilon:g}, delta "
                                f"{inst.max_delta:g}; only the administrator can raise it")
            record = {"kind": "raise", "domain": _RAISE_DOMAIN,
                      "ledger_id": self.store.ledger_id(), "dataset": self.dataset,
                      "when": now(), "nonce": secrets.token_hex(8), "by": signer,
                      "reason": reason.strip(),
                      "lifetime_epsilon": {"from": old_eps, "to": new_eps},
                      "lifetime_delta": {"from": old_delta, "to": new_delta}}
            record["signature"] = key.sign(_raise_payload(record)).hex()
            self.store.add_raise(record)
            return record

    def raise_signer(self, signing_key: str | Path) -> Ed25519PrivateKey:
        """The private key at ``signing_key``, if the installation trusts it for raises."""
        key = load_private_key(signing_key)
        signer = key_id(key.public_key())
        if signer not in {key_id(load_public_key(p)) for p in self.installation.raise_keys}:
            raise UserError(f"{signing_key}: key {signer} is not trusted for raises by "
                            f"{self.installation.where()}; the administrator lists the "
                            "raise keys in [raise] trusted_keys")
        return key

    def summary(self) -> dict[str, Any]:
        """The dataset's ledger as `selpe-audit ledger show` prints it."""
        state = self._state()
        if self.dataset not in state.caps:
            raise UserError(f"no lifetime ledger for dataset '{self.dataset}' in "
                            f"{self.where}; 'selpe-audit ledger show' lists them")
        spent_eps, spent_delta = state.committed(self.dataset)
        cap_eps, cap_delta = self.caps()
        releases = [{"id": r.rid, "status": r.status, "epsilon": r.epsilon,
                     "delta": r.delta, "started": r.started, "note": r.note,
                     "people": (r.people or {}).get("people")}
                    for r in state.releases.values() if r.dataset == self.dataset]
        return {"dataset": self.dataset, "where": self.where,
                "created": state.created.get(self.dataset), "lifetime_epsilon": cap_eps,
                "lifetime_delta": cap_delta, "committed_epsilon": spent_eps,
                "committed_delta": spent_delta, "releases": releases,
                "raises": state.raises.get(self.dataset, [])}


def datasets(store: LedgerStore) -> list[str]:
    """Every dataset the ledger charged, in the order of their first release."""
    return list(dict.fromkeys(e["dataset"] for e in store.events() if e.get("kind") == "dataset"))


def _raise_payload(record: dict[str, Any]) -> bytes:
    """The exact bytes a raise key signs: the record without its signature."""
    return json.dumps({k: v for k, v in record.items() if k != "signature"}, sort_keys=True,
                      separators=(",", ":")).encode("utf-8")

