"""The privacy ledger of one release, and the lifetime ledger of a dataset.

The lifetime ledger is a JSON file per dataset inside the enclave, in one absolute folder
per installation (`default_ledger_folder`; the enclave image fixes it). A release reserves
its epsilon and delta (releases compose basically: both add up) under an exclusive file
lock *before* reading any private row, so two releases started at once cannot both pass
the check. A reservation is finalised as ``released`` or, when the release stopped before
any DP mechanism ran, ``aborted`` (its epsilon is given back). A crash leaves ``reserved``,
which keeps counting: the conservative choice. Ledgers written before deltas were recorded
count their releases as delta 0, which they were. Over 400 lines: the lock, the caps, the
fingerprint index and the raise record must stay in the one module that writes the file.

The caps (lifetime epsilon and delta) are written when a dataset's ledger is created and
only `LifetimeLedger.raise_caps` (``selpe-audit ledger raise``, signed with a key the
installation trusts for raises) changes them: a release's settings can lower its own cap,
never raise the stored one, and no cap in force exceeds the installation's maximum
(`release.installation`). A dataset is the people in it: the folder keeps keyed hashes of
every charged dataset's units (`release.ledger_units`), and rows that overlap another
dataset's beyond the installation's threshold are refused, naming it. Every ledger file and
the index carry a MAC keyed with the folder's secret; a file edited by hand is refused.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import math
import os
import re
import secrets
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import polars as pl
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from release.installation import (
    DEFAULT_MAX_DELTA,
    DEFAULT_MAX_EPSILON,
    Installation,
    load_installation,
)
from release.ledger_units import UnitHashes, hash_units, overlap
from release.ledger_units import fingerprint as units_fingerprint
from selpe_audit.artifact.canonical import atomic_write_bytes
from selpe_audit.artifact.records import Ledger, LedgerEntry, json_form
from selpe_audit.artifact.signing import key_id, load_private_key, load_public_key
from selpe_audit.errors import UserError


def ledger_block(entries: list[LedgerEntry], total_epsilon: float, accountant: str,
                 total_delta: float = 0.0) -> dict[str, Any]:
    """The artifact's ``ledger`` block."""
    return json_form(Ledger(tuple(entries), total_epsilon, total_delta, accountant))


LEDGER_ENV = "SELPE_AUDIT_LEDGER"  # the installation's ledger folder (absolute)
FIXED_ENV = "SELPE_AUDIT_LEDGER_FIXED"  # "1": no setting may point a release elsewhere
SYSTEM_LEDGER = Path("/var/lib/selpe-audit/ledger")
DEFAULT_LIFETIME_EPSILON = DEFAULT_MAX_EPSILON  # a new ledger's caps with no installation file
DEFAULT_LIFETIME_DELTA = DEFAULT_MAX_DELTA
LEDGER_FORMAT = "selpe-audit/lifetime-ledger"
_MAC_DOMAIN = b"selpe-audit/ledger-mac/1"
_RAISE_DOMAIN = "selpe-audit/ledger-raise/1"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _safe_name(dataset: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", dataset) or "dataset"


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


def ledger_folder(configured: str | Path | None) -> Path:
    """The folder a release charges: the configured one (made absolute) or the default.

    Where the installation fixes the folder (``SELPE_AUDIT_LEDGER_FIXED=1``), a configured
    folder other than the fixed one is refused: another folder would be a fresh budget.
    """
    default = default_ledger_folder()
    if configured is None or str(configured) == "":
        return default
    chosen = Path(configured).expanduser().absolute()
    if ledger_is_fixed() and os.path.realpath(chosen) != os.path.realpath(default):
        raise UserError(f"config: this installation fixes the lifetime ledger folder "
                        f"({FIXED_ENV}); remove budget.lifetime_ledger / --lifetime-ledger")
    return default if ledger_is_fixed() else chosen


@contextmanager
def _flock(lock_path: Path, what: str, timeout_s: float = 60.0) -> Iterator[None]:
    """An exclusive lock on ``lock_path`` (created 0600), waiting up to ``timeout_s``."""
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o600)
    except OSError as e:
        raise UserError(f"{lock_path.parent}: cannot use the lifetime ledger folder "
                        f"({e.strerror})") from None
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise UserError(f"{lock_path}: another process holds the {what} lock; "
                                    "wait for it to finish") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    atomic_write_bytes(path, (json.dumps(doc, indent=2, sort_keys=True) + "\n")
                       .encode("utf-8"), mode=0o600)


def _read_json(path: Path, what: str) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        assert isinstance(doc, dict)
    except (json.JSONDecodeError, AssertionError, UnicodeDecodeError):
        raise UserError(f"{path}: {what} is corrupt; restore it from backup (it must never be "
                        "deleted to make room for a release)") from None
    return doc


def _mac(key: bytes, doc: dict[str, Any]) -> str:
    body = json.dumps({k: v for k, v in doc.items() if k != "mac"}, sort_keys=True,
                      separators=(",", ":")).encode("utf-8")
    return hmac.new(hmac.new(key, _MAC_DOMAIN, hashlib.sha256).digest(), body,
                    hashlib.sha256).hexdigest()


class LedgerFolder:
    """The installation's ledger folder: a random ledger id (what artifacts name), the
    fingerprint key, and the index from data fingerprints to dataset names."""

    ID_FILE = "ledger-id.json"
    KEY_FILE = "fingerprint.key"
    INDEX_FILE = "fingerprints.json"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._key: bytes | None = None

    def _locked(self) -> Any:
        return _flock(self.path / ".folder.lock", "ledger folder")

    def ledger_id(self) -> str:
        """16 hex digits, random, made once per folder: names the ledger, reveals no path."""
        with self._locked():
            p = self.path / self.ID_FILE
            meta = _read_json(p, "ledger id file")
            if meta is None or not re.fullmatch(r"[0-9a-f]{16}", str(meta.get("ledger_id"))):
                if meta is not None:
                    raise UserError(f"{p}: ledger id file is corrupt; restore it from backup")
                meta = {"ledger_id": secrets.token_hex(8), "created": _now()}
                _write_json(p, meta)
            return str(meta["ledger_id"])

    def key(self) -> bytes:
        """The folder's secret (made once): keys the fingerprints, unit hashes and MACs."""
        if self._key is None:
            with self._locked():
                self._key = self._load_or_make_key()
        return self._key

    def _load_or_make_key(self) -> bytes:
        p = self.path / self.KEY_FILE
        if p.exists():
            text = p.read_text(encoding="ascii", errors="replace").strip()
            if not re.fullmatch(r"[0-9a-f]{64}", text):
                raise UserError(f"{p}: fingerprint key is corrupt; restore it from backup")
            return bytes.fromhex(text)
        if any(self.path.glob("*.ledger.json")):
            raise UserError(f"{p}: the ledger folder's key is missing but ledgers exist; "
                            "restore it from backup")
        key = secrets.token_bytes(32)
        atomic_write_bytes(p, (key.hex() + "\n").encode("ascii"), mode=0o600)
        return key

    def read_sealed(self, path: Path, what: str) -> dict[str, Any] | None:
        """A ledger file whose MAC checks out; one edited by hand is refused."""
        doc = _read_json(path, what)
        if doc is not None and not hmac.compare_digest(str(doc.get("mac", "")),
                                                       _mac(self.key(), doc)):
            raise UserError(f"{path}: the {what}'s MAC does not match: it was edited outside "
                            "selpe-audit (or written before ledgers carried MACs); restore it "
                            "from backup")
        return doc

    def write_sealed(self, path: Path, doc: dict[str, Any]) -> None:
        _write_json(path, {**doc, "mac": _mac(self.key(), doc)})

    def claim(self, fingerprint: str, dataset: str, units: UnitHashes,
              threshold: float) -> None:
        """Record that these rows belong to ``dataset``; refuse if another dataset has them,
        or shares more than ``threshold`` of its units (or theirs) with them."""
        self.key()  # loaded before the lock it takes itself
        with self._locked():
            p = self.path / self.INDEX_FILE
            index = self.read_sealed(p, "fingerprint index") or {}
            known = index.setdefault("fingerprints", {})
            owner = (known.get(fingerprint) or {}).get("dataset")
            if owner is not None and owner != dataset:
                self._refuse(owner, "these rows were released before as")
            for fp, entry in known.items():
                if entry["dataset"] != dataset and fp != fingerprint:
                    share = overlap(units, self._units(fp, entry))
                    if share > threshold:
                        self._refuse(entry["dataset"], f"{share:.0%} of the privacy units of "
                                     "these rows (or of the other's) are in")
            if owner is None:
                data = units.to_bytes()
                atomic_write_bytes(self._units_path(fingerprint), data, mode=0o600)
                known[fingerprint] = {"dataset": dataset,
                                      "units_sha256": hashlib.sha256(data).hexdigest()}
                self.write_sealed(p, index)

    def _refuse(self, owner: str, what: str) -> None:
        raise UserError(
            f"{what} dataset '{owner}' (lifetime ledger "
            f"{self.path / (_safe_name(owner) + '.ledger.json')}); release them with "
            f"--dataset {owner} so they are charged to its budget; no DP mechanism ran")

    def _units_path(self, fingerprint: str) -> Path:
        return self.path / "units" / f"{fingerprint[:32]}.npz"

    def _units(self, fingerprint: str, entry: dict[str, Any]) -> UnitHashes:
        p = self._units_path(fingerprint)
        try:
            data = p.read_bytes()
        except OSError:
            data = b""
        if hashlib.sha256(data).hexdigest() != entry.get("units_sha256"):
            raise UserError(f"{p}: the unit hashes of dataset '{entry['dataset']}' are missing "
                            "or were changed; restore the ledger folder from backup")
        return UnitHashes.from_bytes(data)

    def datasets(self) -> list[str]:
        """Names of the datasets with a ledger in this folder."""
        names = []
        for p in sorted(self.path.glob("*.ledger.json")):
            doc = self.read_sealed(p, "lifetime ledger")
            names.append(str((doc or {}).get("dataset", p.name.removesuffix(".ledger.json"))))
        return names


class LifetimeLedger:
    """Per-dataset record of every release's (epsilon, delta) and the dataset's caps, under
    an exclusive lock. ``lifetime_epsilon``/``lifetime_delta`` are this release's settings:
    the caps of a new ledger, at most the stored caps of an existing one (None: the stored
    caps, or the installation's maximum for a new ledger); no cap in force exceeds the
    installation's maximum (default: `load_installation`)."""

    def __init__(self, folder: str | Path, dataset: str, lifetime_epsilon: float | None = None,
                 lifetime_delta: float | None = None,
                 installation: Installation | None = None) -> None:
        self.folder = LedgerFolder(folder)
        self.path = Path(folder) / f"{_safe_name(dataset)}.ledger.json"
        self.lock_path = self.path.with_suffix(".lock")
        self.dataset = dataset
        self.lifetime_epsilon = lifetime_epsilon
        self.lifetime_delta = lifetime_delta
        self.installation = installation or load_installation()

    def _locked(self) -> Any:
        return _flock(self.lock_path, "lifetime ledger")

    def _read(self) -> dict[str, Any] | None:
        doc = self.folder.read_sealed(self.path, "lifetime ledger")
        if doc is None:
            return None
        if not isinstance(doc.get("releases"), list):
            raise UserError(f"{self.path}: lifetime ledger is corrupt; restore it from backup "
                            "(it must never be deleted to make room for a release)")
        if doc.get("dataset", self.dataset) != self.dataset:
            raise UserError(f"{self.path}: this ledger file belongs to dataset "
                            f"'{doc['dataset']}'; choose a dataset name that differs in its "
                            "letters, digits, '.', '_' or '-'")
        return doc

    def _new(self) -> dict[str, Any]:
        inst = self.installation
        eps = inst.max_epsilon if self.lifetime_epsilon is None else self.lifetime_epsilon
        delta = inst.max_delta if self.lifetime_delta is None else self.lifetime_delta
        return {"format": LEDGER_FORMAT, "dataset": self.dataset, "created": _now(),
                "lifetime_epsilon": eps, "lifetime_delta": delta, "releases": [], "raises": []}

    def _write(self, doc: dict[str, Any]) -> None:
        self.folder.write_sealed(self.path, doc)

    def exists(self) -> bool:
        return self.path.exists()

    def spent(self) -> tuple[float, float]:
        """(epsilon, delta) committed: every release not aborted, reserved ones included."""
        return _committed(self._read() or self._new())

    def caps(self) -> tuple[float, float]:
        """The caps in force: the stored ones (a new ledger's would-be caps), at most the
        installation's maximum."""
        stored = _caps(self._read() or self._new())
        ceiling = (self.installation.max_epsilon, self.installation.max_delta)
        return min(stored[0], ceiling[0]), min(stored[1], ceiling[1])

    def _effective_caps(self, doc: dict[str, Any]) -> tuple[float, float]:
        """The caps in force, lowered (never raised) by this release's settings."""
        out = []
        ceilings = (self.installation.max_epsilon, self.installation.max_delta)
        for asked, stored, ceiling, what in zip((self.lifetime_epsilon, self.lifetime_delta),
                                                _caps(doc), ceilings, ("epsilon", "delta"),
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
        """Reserve (epsilon, delta) for a new release, or refuse if the lifetime budget would
        be exceeded; the first reservation creates the ledger and fixes its caps."""
        with self._locked():
            doc = self._read() or self._new()
            cap_eps, cap_delta = self._effective_caps(doc)
            spent_eps, spent_delta = _committed(doc)
            if spent_eps + epsilon > cap_eps + 1e-12:
                lowered = (f", lowered from {_caps(doc)[0]:g} by this release's lifetime_epsilon"
                           f" or {self.installation.where()}" if cap_eps < _caps(doc)[0] else "")
                raise UserError(
                    f"lifetime budget for dataset '{self.dataset}' would be exceeded: "
                    f"{spent_eps:g} spent + {epsilon:g} requested > {cap_eps:g}{lowered} "
                    f"(ledger {self.path}); no data was read")
            if delta and spent_delta + delta > cap_delta * (1 + 1e-9):
                raise UserError(
                    f"lifetime delta for dataset '{self.dataset}' would be exceeded: "
                    f"{spent_delta:g} spent + {delta:g} requested > {cap_delta:g} "
                    f"(ledger {self.path}); no data was read")
            rid = uuid.uuid4().hex[:12]
            entry = {"id": rid, "epsilon": epsilon, "status": "reserved", "started": _now(),
                     "note": note}
            if delta:
                entry["delta"] = delta
            doc["releases"].append(entry)
            self._write(doc)
            return rid

    def bind_data(self, rid: str, rows: pl.DataFrame, unit_column: str | None = None) -> str:
        """After reading, before any mechanism: fingerprint the rows, hash their units
        (``unit_column``: the person id; None: rows) and claim them for this dataset. Rows
        of another dataset, or overlapping one, are refused; a ledger that this refused
        release created is removed again (nothing was spent)."""
        units = hash_units(self.folder.key(), rows, unit_column)
        fingerprint = units_fingerprint(self.folder.key(), units)
        try:
            self.folder.claim(fingerprint, self.dataset, units,
                              self.installation.overlap_threshold)
        except UserError:
            self._drop_if_unused(rid)
            raise
        with self._locked():
            doc = self._read()
            if doc is not None:
                for r in doc["releases"]:
                    if r["id"] == rid:
                        r["data_fingerprint"] = fingerprint
                self._write(doc)
        return fingerprint

    def _drop_if_unused(self, rid: str) -> None:
        with self._locked():
            doc = self._read()
            if doc is None:
                return
            for r in doc["releases"]:
                if r["id"] == rid:
                    r["status"] = "aborted"
            unused = (all(r["status"] == "aborted" and "data_fingerprint" not in r
                          for r in doc["releases"]) and not doc.get("raises"))
            if unused:
                self.path.unlink()
            else:
                self._write(doc)

    def finish(self, rid: str, status: str, epsilon: float | None = None,
               delta: float | None = None) -> None:
        with self._locked():
            doc = self._read()
            mine = [r for r in (doc or {}).get("releases", []) if r["id"] == rid]
            for r in mine:
                r["status"] = status
                r["finished"] = _now()
                if epsilon is not None:
                    r["epsilon"] = epsilon
                if delta is not None:
                    r["delta"] = delta
            if doc is not None and mine:
                self._write(doc)

    def raise_caps(self, signing_key: str | Path, reason: str, epsilon: float | None = None,
                   delta: float | None = None) -> dict[str, Any]:
        """Raise the stored caps (at most to the installation's maximum), signed by a key
        the installation trusts for raises; records the key, when, why and the signature."""
        if not reason.strip():
            raise UserError("ledger raise: --reason must say why the cap is raised")
        key = self.raise_signer(signing_key)
        signer = key_id(key.public_key())
        with self._locked():
            doc = self._read()
            if doc is None:
                raise UserError(f"no lifetime ledger for dataset '{self.dataset}' in "
                                f"{self.path.parent}; 'selpe-audit ledger show' lists them")
            old_eps, old_delta = _caps(doc)
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
            record = {"domain": _RAISE_DOMAIN, "ledger_id": self.folder.ledger_id(),
                      "dataset": self.dataset, "when": _now(), "nonce": secrets.token_hex(8),
                      "by": signer, "reason": reason.strip(),
                      "lifetime_epsilon": {"from": old_eps, "to": new_eps},
                      "lifetime_delta": {"from": old_delta, "to": new_delta}}
            record["signature"] = key.sign(_raise_payload(record)).hex()
            doc.setdefault("raises", []).append(record)
            doc["lifetime_epsilon"], doc["lifetime_delta"] = new_eps, new_delta
            self._write(doc)
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
        """The ledger as `selpe-audit ledger show` prints it."""
        doc = self._read()
        if doc is None:
            raise UserError(f"no lifetime ledger for dataset '{self.dataset}' in "
                            f"{self.path.parent}; 'selpe-audit ledger show' lists them")
        spent_eps, spent_delta = _committed(doc)
        cap_eps, cap_delta = self.caps()
        return {"dataset": self.dataset, "file": str(self.path), "created": doc.get("created"),
                "lifetime_epsilon": cap_eps, "lifetime_delta": cap_delta,
                "committed_epsilon": spent_eps, "committed_delta": spent_delta,
                "releases": doc["releases"], "raises": doc.get("raises", [])}


def _raise_payload(record: dict[str, Any]) -> bytes:
    """The exact bytes a raise key signs: the record without its signature."""
    return json.dumps({k: v for k, v in record.items() if k != "signature"}, sort_keys=True,
                      separators=(",", ":")).encode("utf-8")


def _caps(doc: dict[str, Any]) -> tuple[float, float]:
    return float(doc["lifetime_epsilon"]), float(doc["lifetime_delta"])


def _committed(doc: dict[str, Any]) -> tuple[float, float]:
    live = [r for r in doc["releases"] if r["status"] != "aborted"]
    return sum(r["epsilon"] for r in live), sum(r.get("delta", 0.0) for r in live)
