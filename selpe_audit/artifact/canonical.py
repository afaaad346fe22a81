"""Canonical JSON and atomic file writes.

Signatures cover exact bytes, so the artifact has one byte form: keys sorted, UTF-8,
no insignificant whitespace, one trailing newline, no NaN/Infinity, and floats only where
they round-trip (Python writes the shortest repr that reads back to the same double).
Integers beyond 2**53 are refused because many JSON readers turn them into doubles.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

_MAX_SAFE_INT = 2**53


def _check(value: Any, where: str) -> None:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, int):
        if abs(value) > _MAX_SAFE_INT:
            raise ValueError(f"{where}: integer too large for portable JSON")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where}: NaN or infinity cannot be written to canonical JSON")
        if float(repr(value)) != value:
            raise ValueError(f"{where}: float does not round-trip")
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"{where}: object keys must be strings")
            _check(v, f"{where}/{k}")
        return
    if isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _check(v, f"{where}/{i}")
        return
    raise ValueError(f"{where}: {type(value).__name__} is not a JSON value")


def canonical_bytes(obj: Any) -> bytes:
    """The one byte form of ``obj`` that signatures and hashes are taken over."""
    _check(obj, "")
    text = json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False)
    return text.encode("utf-8") + b"\n"


def atomic_write_bytes(path: str | Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` so that readers see the old file or the new one, never half of one."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(p.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def atomic_write_json(path: str | Path, obj: Any) -> bytes:
    data = canonical_bytes(obj)
    atomic_write_bytes(path, data)
    return data
