"""The privacy ledger of one release, and the lifetime ledger of a dataset.

The lifetime ledger is a JSON file per dataset inside the enclave. A release reserves its
epsilon and delta (releases compose basically: both add up) under an exclusive file lock
*before* reading any private row, so two releases
started at once cannot both pass the check. A reservation is finalised as ``released`` or,
when the release stopped before any DP mechanism ran, ``aborted`` (its epsilon is given
back). A crash leaves ``reserved``, which keeps counting: the conservative choice. Ledgers
written before deltas were recorded count their releases as delta 0, which they were.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from selpe_audit.artifact.canonical import atomic_write_bytes
from selpe_audit.errors import UserError


@dataclass(frozen=True)
class LedgerEntry:
    """One mechanism's accounting, as OpenDP reports it."""

    id: str
    mechanism: str
    constructor: str
    scale: float
    epsilon: float
    delta: float
    scope: str
    composition: str
    accounting: str = "pure epsilon-DP"  # or "rho-zCDP" (epsilon, delta then in a conversion)
    rho: float | None = None
    mu: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def ledger_block(entries: list[LedgerEntry], total_epsilon: float, accountant: str,
                 total_delta: float = 0.0) -> dict:
    return {"entries": [e.to_json() for e in entries], "total_epsilon": total_epsilon,
            "total_delta": total_delta, "accountant": accountant}


def _safe_name(dataset: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", dataset) or "dataset"


class LifetimeLedger:
    """Per-dataset record of every release's (epsilon, delta), guarded by an exclusive lock."""

    def __init__(self, folder: Path, dataset: str, lifetime_epsilon: float,
                 lifetime_delta: float = 0.0) -> None:
        self.path = Path(folder) / f"{_safe_name(dataset)}.ledger.json"
        self.lock_path = self.path.with_suffix(".lock")
        self.dataset = dataset
        self.lifetime_epsilon = lifetime_epsilon
        self.lifetime_delta = lifetime_delta

    @contextmanager
    def _locked(self, timeout_s: float = 60.0) -> Iterator[None]:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.lock_path, os.O_CREAT | os.O_RDWR, 0o600)
        except OSError as e:
            raise UserError(f"{self.path.parent}: cannot use the lifetime ledger folder "
                            f"({e.strerror})") from None
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise UserError(f"{self.lock_path}: another release holds the lifetime "
                                        "ledger lock; wait for it to finish") from None
                    time.sleep(0.05)
            yield
        finally:
            os.close(fd)

    def _read(self) -> dict[str, Any]:
        if not self.path.exists():
            return {"dataset": self.dataset, "releases": []}
        try:
            doc = json.loads(self.path.read_text(encoding="utf-8"))
            assert isinstance(doc.get("releases"), list)
        except (json.JSONDecodeError, AssertionError, UnicodeDecodeError):
            raise UserError(f"{self.path}: lifetime ledger is corrupt; restore it from backup "
                            "(it must never be deleted to make room for a release)") from None
        return doc

    def _write(self, doc: dict[str, Any]) -> None:
        atomic_write_bytes(self.path, (json.dumps(doc, indent=2, sort_keys=True) + "\n")
                           .encode("utf-8"), mode=0o600)

    def spent(self) -> tuple[float, float]:
        """(epsilon, delta) committed: every release not aborted, reserved ones included."""
        return _committed(self._read())

    def reserve(self, epsilon: float, delta: float = 0.0, note: str = "") -> str:
        """Reserve (epsilon, delta) for a new release, or refuse if the lifetime budget would
        be exceeded."""
        with self._locked():
            doc = self._read()
            spent_eps, spent_delta = _committed(doc)
            if spent_eps + epsilon > self.lifetime_epsilon + 1e-12:
                raise UserError(
                    f"lifetime budget for dataset '{self.dataset}' would be exceeded: "
                    f"{spent_eps:g} spent + {epsilon:g} requested > {self.lifetime_epsilon:g} "
                    f"(ledger {self.path}); no data was read")
            if delta and spent_delta + delta > self.lifetime_delta * (1 + 1e-9):
                raise UserError(
                    f"lifetime delta for dataset '{self.dataset}' would be exceeded: "
                    f"{spent_delta:g} spent + {delta:g} requested > {self.lifetime_delta:g} "
                    f"(ledger {self.path}); no data was read")
            rid = uuid.uuid4().hex[:12]
            entry = {"id": rid, "epsilon": epsilon, "status": "reserved",
                     "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "note": note}
            if delta:
                entry["delta"] = delta
            doc["releases"].append(entry)
            doc["lifetime_epsilon"] = self.lifetime_epsilon
            doc["lifetime_delta"] = self.lifetime_delta
            self._write(doc)
            return rid

    def finish(self, rid: str, status: str, epsilon: float | None = None,
               delta: float | None = None) -> None:
        with self._locked():
            doc = self._read()
            for r in doc["releases"]:
                if r["id"] == rid:
                    r["status"] = status
                    if epsilon is not None:
                        r["epsilon"] = epsilon
                    if delta is not None:
                        r["delta"] = delta
            self._write(doc)


def _committed(doc: dict[str, Any]) -> tuple[float, float]:
    live = [r for r in doc["releases"] if r["status"] != "aborted"]
    return sum(r["epsilon"] for r in live), sum(r.get("delta", 0.0) for r in live)
