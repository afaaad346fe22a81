"""The installation's own limits: a root-owned file that no release setting can exceed.

``/etc/selpe-audit/installation.toml`` (``$SELPE_AUDIT_INSTALLATION`` names another path,
which must be root-owned all the same) holds the administrator's ceiling on every dataset's
lifetime epsilon and delta, the share of privacy units two datasets may have in common
before they count as one, and the public keys trusted to sign ``ledger raise``::

    [lifetime]
    max_epsilon = 10.0
    max_delta = 1e-5
    overlap_threshold = 0.05

    [raise]
    trusted_keys = ["/etc/selpe-audit/raise-board.pub.pem"]

The file, its folder and every raise key must be owned by root and writable by no one
else: a steward who could edit them could lift their own ceiling. Without the file, the
built-in defaults below are the ceiling and no key may raise a cap.
"""

from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from selpe_audit.errors import UserError

INSTALLATION_ENV = "SELPE_AUDIT_INSTALLATION"
SYSTEM_INSTALLATION = Path("/etc/selpe-audit/installation.toml")
DEFAULT_MAX_EPSILON = 10.0
DEFAULT_MAX_DELTA = 1e-5  # ten releases at the default delta
# A new dataset sharing more than this share of its (or the other's) units with a charged
# dataset is that dataset: overlapping people compose, so the bar is low; see ledger_units.
DEFAULT_OVERLAP_THRESHOLD = 0.05


@dataclass(frozen=True)
class Installation:
    """The ceiling on lifetime caps, the overlap threshold and the raise keys in force."""

    max_epsilon: float = DEFAULT_MAX_EPSILON
    max_delta: float = DEFAULT_MAX_DELTA
    overlap_threshold: float = DEFAULT_OVERLAP_THRESHOLD
    raise_keys: tuple[Path, ...] = ()
    source: str = f"built-in defaults (no {SYSTEM_INSTALLATION})"

    @classmethod
    def for_experiments(cls, why: str) -> Installation:
        """No ceiling, for code that runs many releases on public data (benchmarks,
        audits); only code can ask for it, never a flag or a config file."""
        return cls(max_epsilon=math.inf, max_delta=1.0 - 1e-12, source=f"experiments: {why}")

    def where(self) -> str:
        return f"this installation's maximum ({self.source})"


def installation_path() -> Path:
    env = os.environ.get(INSTALLATION_ENV, "").strip()
    return Path(env) if env else SYSTEM_INSTALLATION


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
    unknown = set(doc) - {"lifetime", "raise"}
    if unknown:
        raise UserError(f"{p}: unknown section(s) {sorted(unknown)}; only [lifetime] and "
                        "[raise]")
    life, rse = _table(doc, "lifetime", p), _table(doc, "raise", p)
    keys = rse.get("trusted_keys", [])
    if not (isinstance(keys, list) and all(isinstance(k, str) for k in keys)):
        raise UserError(f"{p}: [raise] trusted_keys must be a list of public key paths")
    for k in keys:
        _root_owned(Path(k), "raise key")
    return Installation(
        max_epsilon=_number(life, "max_epsilon", DEFAULT_MAX_EPSILON, p, lambda v: v > 0),
        max_delta=_number(life, "max_delta", DEFAULT_MAX_DELTA, p, lambda v: 0 <= v < 1),
        overlap_threshold=_number(life, "overlap_threshold", DEFAULT_OVERLAP_THRESHOLD, p,
                                  lambda v: 0 < v <= 1),
        raise_keys=tuple(Path(k) for k in keys), source=str(p))


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
