"""The installation's own limits: a root-owned file that no release setting can exceed.

``/etc/selpe-audit/installation.toml`` holds the administrator's ceiling on every person's
and every dataset's lifetime epsilon and delta, where the lifetime ledger lives, and the
public keys trusted to sign ``ledger raise``::

    [installation]          # required: says what the file is
    name = "ED research enclave"

    [lifetime]
    max_epsilon = 10.0
    max_delta = 1e-5

    [ledger]                # optional: then no flag, config or variable points elsewhere
    url = "postgresql://selpe_steward@ledger-db:5432/selpe_ledger"  # or folder = "/abs/path"
    ledger_id = "3f2a9c0d1e4b5a67"  # with url: the id the database must answer with

    [raise]
    trusted_keys = ["/etc/selpe-audit/raise-board.pub.pem"]

    [identity]              # optional: who a person is, from the hospital's records
    linkage = ["mrn"]       # fields naming one person in every extract (the id may be one)
    required = true         # then a release whose schema lacks them is refused

    [schemas]               # optional: then a release of any other schema is refused
    approved = ["<schema SHA-256>"]          # and/or
    folder = "/etc/selpe-audit/schemas"      # every *.json in it (root-owned)

The file, its folder and every raise key must be owned by root and writable by no one
else: a steward who could edit them could lift their own ceiling. ``$SELPE_AUDIT_INSTALLATION``
names another file where the system one does not exist (a test or a machine of one's own);
where it exists, only that same file is accepted. Without any file, the built-in defaults
below are the ceiling and no key may raise a cap.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from selpe_audit.errors import UserError

INSTALLATION_ENV = "SELPE_AUDIT_INSTALLATION"
SYSTEM_INSTALLATION = Path("/etc/selpe-audit/installation.toml")
DEFAULT_MAX_EPSILON = 10.0
DEFAULT_MAX_DELTA = 1e-5  # ten releases at the default delta
SECTIONS = ("installation", "lifetime", "ledger", "raise", "schemas", "identity")


@dataclass(frozen=True)
class Installation:
    """The ceiling on lifetime caps, the ledger (None: the release's setting or the default
    folder) and the raise keys in force."""

    max_epsilon: float = DEFAULT_MAX_EPSILON
    max_delta: float = DEFAULT_MAX_DELTA
    raise_keys: tuple[Path, ...] = ()
    source: str = f"built-in defaults (no {SYSTEM_INSTALLATION})"
    ledger: str | Path | None = None
    ledger_id: str | None = None  # a PostgreSQL ledger's own id, which it must answer with
    approved_schemas: frozenset[str] | None = None  # SHA-256s; None: any schema
    linkage: tuple[str, ...] = ()  # the administrator's linkage fields (else the schema's)
    linkage_required: bool = False
    administered: bool = False  # read from an administrator's file (not the defaults)

    def check_unit(self, unit: str, schema: Any) -> None:
        """Under an administrator's file, refuse a row-unit release of a table that names
        its people: it protects a person with m rows only at m x epsilon, which the ledger
        cannot charge them (it charges a release's epsilon once per person)."""
        if self.administered and unit == "row" and schema.id_field is not None:
            raise UserError(f"unit = 'row' on a table whose rows name their people "
                            f"({schema.id_field}) protects a person with m rows only at m x "
                            f"epsilon, which the lifetime ledger cannot charge them; "
                            f"{self.source} refuses it: use unit = 'person'; no data was read")

    def linkage_fields(self, schema: Any) -> tuple[str, ...]:
        """The fields that name a person across extracts in ``schema``: the installation's
        when it names any (refused where required and missing), else the schema's
        ``x-linkage``."""
        if not self.linkage:
            return tuple(schema.linkage_fields)
        missing = [f for f in self.linkage if f not in schema.field_names]
        if missing and self.linkage_required:
            raise UserError(f"the schema lacks the linkage field(s) {', '.join(missing)} that "
                            f"{self.source} requires ([identity]); add them to the extract "
                            "and its schema; no data was read")
        return () if missing else self.linkage

    def check_schema(self, sha256: str) -> None:
        """Refuse a schema the administrator did not approve (when a list is in force)."""
        if self.approved_schemas is not None and sha256 not in self.approved_schemas:
            raise UserError(f"schema {sha256} is not among the {len(self.approved_schemas)} "
                            f"schema(s) {self.source} approves; ask the administrator to "
                            "approve it ([schemas]); no data was read")

    @classmethod
    def for_experiments(cls, why: str) -> Installation:
        """No ceiling, for code that runs many releases on public data (benchmarks,
        audits); only code can ask for it, never a flag or a config file."""
        return cls(max_epsilon=math.inf, max_delta=1.0 - 1e-12, source=f"experiments: {why}")

    def where(self) -> str:
        return f"this installation's maximum ({self.source})"


def installation_path() -> Path:
    """The installation file in force: the system one when it exists (``$SELPE_AUDIT_
    INSTALLATION`` may only name that same file then), else the variable's, else the system
    path (absent: the built-in defaults)."""
    env = os.environ.get(INSTALLATION_ENV, "").strip()
    if not env:
        return SYSTEM_INSTALLATION
    if SYSTEM_INSTALLATION.exists() and \
            os.path.realpath(env) != os.path.realpath(SYSTEM_INSTALLATION):
        raise UserError(f"{INSTALLATION_ENV}={env}: the administrator's {SYSTEM_INSTALLATION} "
                        "exists and is the only installation file in force; unset the "
                        "variable")
    return Path(env)


def load_installation(path: Path | None = None) -> Installation:
    """The installation file's limits (checked root-owned), or the built-in defaults."""
    p = path or installation_path()
    if not p.exists():
        if path is not None or os.environ.get(INSTALLATION_ENV, "").strip():
            raise UserError(f"{p}: installation file not found ({INSTALLATION_ENV})")
        return Installation()
    _root_owned(p, "installation file")
    try:
        doc = tomllib.loads(p.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{p}: not valid TOML ({e}); ask the administrator to fix it") from None
    if not isinstance(doc.get("installation"), dict):
        raise UserError(f"{p}: not a selpe-audit installation file (it has no [installation] "
                        "table); the administrator's file says what it is")
    unknown = set(doc) - set(SECTIONS)
    if unknown:
        raise UserError(f"{p}: unknown section(s) {sorted(unknown)}; only "
                        + ", ".join(f"[{s}]" for s in SECTIONS))
    life, rse = _table(doc, "lifetime", p), _table(doc, "raise", p)
    keys = rse.get("trusted_keys", [])
    if not (isinstance(keys, list) and all(isinstance(k, str) for k in keys)):
        raise UserError(f"{p}: [raise] trusted_keys must be a list of public key paths")
    for k in keys:
        _root_owned(Path(k), "raise key")
    return Installation(
        max_epsilon=_number(life, "max_epsilon", DEFAULT_MAX_EPSILON, p, lambda v: v > 0),
        max_delta=_number(life, "max_delta", DEFAULT_MAX_DELTA, p, lambda v: 0 <= v < 1),
        raise_keys=tuple(Path(k) for k in keys), source=str(p), administered=True,
        approved_schemas=_approved(_table(doc, "schemas", p), p),
        **_identity(_table(doc, "identity", p), p),
        **_ledger(_table(doc, "ledger", p), p))


def _identity(t: dict[str, Any], p: Path) -> dict[str, Any]:
    """The administrator's linkage fields, and whether every release must have them."""
    if not t:
        return {}
    fields, required = t.get("linkage", []), t.get("required", False)
    if set(t) - {"linkage", "required"} or not isinstance(required, bool) or not (
            isinstance(fields, list) and fields and all(isinstance(f, str) for f in fields)):
        raise UserError(f"{p}: [identity] takes linkage = [\"field\", ...] (at least one) and "
                        "required = true or false")
    return {"linkage": tuple(fields), "linkage_required": required}


def _approved(t: dict[str, Any], p: Path) -> frozenset[str] | None:
    """The SHA-256s of the schemas the administrator approved: listed, and those of every
    ``*.json`` schema in a root-owned folder; None when the file lists none."""
    if not t:
        return None
    if set(t) - {"approved", "folder"}:
        raise UserError(f"{p}: [schemas] takes approved = [\"<sha256>\", ...] and/or "
                        "folder = \"/absolute/path\"")
    listed = t.get("approved", [])
    if not (isinstance(listed, list) and all(isinstance(h, str) and
                                             re.fullmatch(r"[0-9a-f]{64}", h) for h in listed)):
        raise UserError(f"{p}: [schemas] approved must list SHA-256s (64 hex digits), as "
                        "`selpe-audit review` shows a schema's")
    approved = set(listed)
    if "folder" in t:
        from selpe_audit.schema import load_schema

        folder = Path(str(t["folder"]))
        if not folder.is_absolute():
            raise UserError(f"{p}: [schemas] folder must be an absolute path")
        for f in sorted(folder.glob("*.json")):
            _root_owned(f, "approved schema")
            approved.add(load_schema(f).sha256())
    return frozenset(approved)


def _ledger(t: dict[str, Any], p: Path) -> dict[str, Any]:
    """The ledger the installation names: a postgresql:// URL that names its host, port and
    database, with the ledger's id, or an absolute folder."""
    if not t:
        return {}
    if set(t) not in ({"url", "ledger_id"}, {"folder"}):
        raise UserError(f"{p}: [ledger] takes url = \"postgresql://role@host:port/database\" "
                        "with ledger_id = \"<the 16 hex digits ledger_info() answers>\", or "
                        "folder = \"/absolute/path\"")
    if "url" in t:
        from release.ledger_postgres import pinned_url

        ledger_id = str(t["ledger_id"])
        if not re.fullmatch(r"[0-9a-f]{16}", ledger_id):
            raise UserError(f"{p}: [ledger] ledger_id must be the 16 hex digits the ledger's "
                            "database answers (SELECT ledger_id FROM ledger_info())")
        return {"ledger": pinned_url(str(t["url"]), f"{p}: [ledger] url"),
                "ledger_id": ledger_id}
    folder = Path(str(t["folder"]))
    if not folder.is_absolute():
        raise UserError(f"{p}: [ledger] folder must be an absolute path")
    return {"ledger": folder}


def _table(doc: dict[str, Any], name: str, p: Path) -> dict[str, Any]:
    t = doc.get(name, {})
    if not isinstance(t, dict):
        raise UserError(f"{p}: [{name}] must be a table")
    return t


def _number(t: dict[str, Any], name: str, default: float, p: Path, ok: Any) -> float:
    v = t.get(name, default)
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not ok(v):
        raise UserError(f"{p}: [lifetime] {name} = {v!r} is out of range")
    return float(v)


def _root_owned(p: Path, what: str) -> None:
    """Refuse a file (or its folder) that anyone but root could have written."""
    for q in (p, p.parent):
        try:
            st = q.stat()
        except OSError as e:
            raise UserError(f"{q}: cannot read the {what} ({e.strerror})") from None
        if st.st_uid != 0 or st.st_mode & 0o022:
            raise UserError(f"{q}: the {what} must be owned by root and writable by no one "
                            "else (chown root; chmod go-w); it is not trusted")
