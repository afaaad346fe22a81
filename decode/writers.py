"""The decode's outputs: the records (Parquet, CSV or JSONL by extension, via polars) and the
provenance file next to them. Both are written atomically: a reader sees the old file or
the new one, never half of one. Every record is validated against the schema's record
JSON Schema before anything is written.
"""

from __future__ import annotations

import hashlib
import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from selpe_audit.artifact.canonical import atomic_write_bytes, atomic_write_json
from selpe_audit.errors import UserError
from selpe_audit.schema import Schema

FORMATS = {".parquet": "parquet", ".csv": "csv", ".jsonl": "jsonl"}
PROVENANCE_FORMAT = "selpe-audit/decode-provenance"


@dataclass(frozen=True)
class DecodeResult:
    """What a decode wrote: the records, their provenance, and the provenance's content."""

    out: Path
    provenance: Path
    rows: int
    provenance_doc: dict[str, Any]


def output_format(out: Path) -> str:
    """``parquet``, ``csv`` or ``jsonl`` from the extension; anything else is refused."""
    fmt = FORMATS.get(out.suffix.lower())
    if fmt is None:
        raise UserError(f"{out}: unknown output extension '{out.suffix}'; use one of "
                        f"{', '.join(FORMATS)}")
    return fmt


def check_writable(out: Path) -> None:
    """Refuse early when the output (and so its checkpoint) cannot be written."""
    if out.is_dir():
        raise UserError(f"{out}: is a folder; give an output file name")
    folder = next((p for p in (out.parent, *out.parent.parents) if p.exists()), Path("."))
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(f"{out}: cannot write there ({folder} is not a writable folder)")
    if out.exists() and not os.access(out, os.W_OK):
        raise UserError(f"{out}: exists and is not writable")


def provenance_path(out: Path) -> Path:
    return out.with_name(out.name + ".provenance.json")


def check_records(records: list[dict[str, Any]], schema: Schema) -> int:
    """Validate every record; return how many passed (all of them, or this raises)."""
    bad = len(records) - count_valid(records, schema)
    if bad:
        raise RuntimeError(f"{bad} of {len(records)} decoded records break the schema")
    return len(records)


def count_valid(records: list[dict[str, Any]], schema: Schema) -> int:
    """How many of ``records`` validate against the record schema."""
    is_valid = schema.record_check()
    return sum(1 for r in records if is_valid(r))


def valid_share(records: list[dict[str, Any]], schema: Schema) -> float:
    """The share of ``records`` that validate against the record schema (1.0 for none):
    measured on the candidates before selection, so a decoder that emits invalid records
    shows it even when selection happens to leave them out."""
    return count_valid(records, schema) / len(records) if records else 1.0


def _columns(schema: Schema) -> dict[str, type[pl.DataType]]:
    types = {"integer": pl.Int64, "number": pl.Float64, "string": pl.String}
    return {f.name: types[f.json_type] for f in schema.record_fields}


def write_records(out: Path, records: list[dict[str, Any]], schema: Schema) -> str:
    """Write the records in the format the extension names; return the file's SHA-256."""
    return write_frame(out, pl.DataFrame(records, schema=_columns(schema)))


def read_jsonl(path: Path, schema: Schema) -> pl.DataFrame:
    """Records that `write_records` wrote to a ``.jsonl`` file, typed by the schema (so
    writing them again gives the same bytes)."""
    if path.stat().st_size == 0:  # a part without rows
        return pl.DataFrame(schema=_columns(schema))
    return pl.read_ndjson(path, schema=_columns(schema))


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_frame(out: Path, df: pl.DataFrame) -> str:
    """Write a frame of records in the format the extension names; return its SHA-256."""
    buf = io.BytesIO()
    fmt = output_format(out)
    if fmt == "parquet":
        df.write_parquet(buf)
    elif fmt == "csv":
        df.write_csv(buf)
    else:
        df.write_ndjson(buf)
    data = buf.getvalue()
    try:
        atomic_write_bytes(out, data)
    except OSError as e:
        raise UserError(f"{out}: cannot write the output ({e.strerror})") from None
    return hashlib.sha256(data).hexdigest()


def write_provenance(out: Path, doc: dict[str, Any]) -> Path:
    path = provenance_path(out)
    try:
        atomic_write_json(path, doc)
    except OSError as e:
        raise UserError(f"{path}: cannot write provenance ({e.strerror})") from None
    return path
