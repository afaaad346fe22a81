"""Reading the audits' inputs and writing their reports.

Every data file (synthetic or private) is read through ``release.private_data``, the one
module that opens private files, so coercion, validation and value-free error messages are
the same as in the release. Synthetic records carry no person id, so all files are read
with the *record* schema (the dataset schema minus its ``x-id`` field); an id column in a
private file is then simply ignored. Audits are row-level: each row is one target.

Reports hold statistics of private rows (distances, error rates). They are not DP outputs:
keep them inside the enclave, and never write them into an artifact folder.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from release.private_data import PrivateTable, read_private_rows
from selpe_audit.artifact.canonical import atomic_write_bytes
from selpe_audit.errors import UserError
from selpe_audit.person_schema import KEYWORDS as PERSON_KEYWORDS
from selpe_audit.schema import Schema, load_schema, parse_schema

RELEASE_FILE = "release.json"  # the marker of an artifact folder (selpe_audit.artifact.document)
REPORT_NOTE = ("computed from private rows; not a DP output - keep this report inside the "
               "enclave")


def record_schema(schema: Schema) -> Schema:
    """The schema of a synthetic record: the same fields, no person id (and so no person
    structure)."""
    if schema.id_field is None:
        return schema
    # without the id a record has no person: the person structure goes with it
    raw = {k: v for k, v in schema.raw.items() if k != "x-id" and k not in PERSON_KEYWORDS}
    raw["properties"] = {k: v for k, v in schema.raw["properties"].items()
                         if k != schema.id_field}
    raw["required"] = [k for k in schema.raw.get("required", []) if k != schema.id_field]
    if "x-field-order" in raw:
        raw["x-field-order"] = [k for k in raw["x-field-order"] if k != schema.id_field]
    return parse_schema(raw, source=f"schema '{schema.name}' (records)")


def load_record_schema(path: str | Path) -> Schema:
    return record_schema(load_schema(path))


def read_records(path: str | Path, schema: Schema) -> list[dict[str, Any]]:
    """All rows of a file as records; any invalid row is a one-line `UserError`."""
    return read_private_rows(path, record_schema(schema), invalid="fail").priv_rows


def read_records_lenient(path: str | Path, schema: Schema) -> PrivateTable:
    """Valid rows plus the per-row problems (fidelity measures validity, so it must not
    stop at the first bad row)."""
    return read_private_rows(path, record_schema(schema), invalid="drop")


def file_info(path: str | Path) -> dict[str, Any]:
    """Name and SHA-256 of an input file, so a report says exactly what it measured."""
    p = Path(path)
    h = hashlib.sha256()
    with p.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return {"path": str(p), "sha256": h.hexdigest()}


def subsample(rows: list[dict[str, Any]], limit: int | None, seed: int) -> list[dict[str, Any]]:
    """At most ``limit`` rows, a seeded uniform sample (audit sampling, not DP noise)."""
    if limit is None or len(rows) <= limit:
        return rows
    idx = np.sort(np.random.default_rng(seed).choice(len(rows), size=limit, replace=False))
    return [rows[i] for i in idx]


# ----- reports -------------------------------------------------------------------------

def _in_artifact(folder: Path) -> Path | None:
    for d in (folder, *folder.parents):
        if (d / RELEASE_FILE).is_file():
            return d
    return None


def default_report_path(kind: str, next_to: str | Path | None) -> Path:
    """``<synthetic stem>.audit-<kind>.json`` next to the synthetic file, else in the cwd
    (also when the synthetic file lies in an artifact folder, which audits never write)."""
    if next_to is not None:
        p = Path(next_to)
        if _in_artifact(p.resolve().parent) is None:
            return p.with_name(f"{p.stem}.audit-{kind}.json")
    return Path.cwd() / f"audit-{kind}.json"


def refuse_artifact_folder(path: str | Path) -> None:
    """Audit reports hold private statistics: never inside an artifact folder."""
    p = Path(path)
    art = _in_artifact(p.resolve().parent)
    if art is not None:
        raise UserError(f"{p}: refusing to write an audit report into the artifact folder "
                        f"{art}; write it to a path outside it")


def write_report(path: str | Path, report: dict[str, Any]) -> Path:
    """Write the report as indented JSON (atomically); refuse artifact folders."""
    p = Path(path)
    refuse_artifact_folder(p)
    data = json.dumps(jsonable(report), indent=2, sort_keys=True, ensure_ascii=False,
                      allow_nan=False).encode("utf-8") + b"\n"
    try:
        atomic_write_bytes(p, data)
    except OSError as e:
        raise UserError(f"{p}: cannot write the report ({e.strerror})") from None
    return p


def jsonable(x: Any) -> Any:
    """numpy scalars and tuples to JSON values; NaN and infinities to null."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return [jsonable(v) for v in x.tolist()]
    if isinstance(x, bool | np.bool_):
        return bool(x)
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, float | np.floating):
        f = float(x)
        return f if math.isfinite(f) else None
    if isinstance(x, Path):
        return str(x)
    return x


# ----- the embedder ----------------------------------------------------------------------

def load_embedder(model: str | None = None) -> Any:
    """The process's embedder for ``model`` (`selpe_audit.models.shared`: loading takes
    seconds; its text cache lives in memory only and is never written)."""
    from selpe_audit.models import shared

    return shared().embedder(model)
