"""selpe-audit: privacy-audited synthetic structured-text data, and its shared core
(schema, artifact, signing, generation, embeddings, kernel, CLI).

The Python API (docs/api.md): in the enclave, `release` (a file, query or DataFrame in, a
signed artifact out), `audit_report` and `audit_mechanism`; for the reviewer, `approve`;
off-site, `open_artifact` (verified as ``decode`` verifies) and `Artifact.sample`. Each
name is looked up in its stage's ``api`` module on first use, as the console script finds
its commands: this package
holds no code that reads private rows and imports no stage package (``release``,
``decode``, ``audits``; tests/test_import_boundaries.py), and an analyst who only opens an
artifact never loads the release stage.
"""

import importlib
import os
from typing import Any

__version__ = "0.1.0"

#: polars' allocator (jemalloc) keeps freed pages for 10 s by default, so one release stage's
#: garbage still counts in the next stage's peak: 3.3 GB against 2.4 GB for a 10^6-row
#: counts-only release. Set before polars loads (this package is imported first); a value the
#: user set wins.
ALLOCATOR_ENV = {"_RJEM_MALLOC_CONF": "dirty_decay_ms:0,muzzy_decay_ms:0"}
#: what polars writes there when it loads first and the user set nothing (it appends a
#: user's value to it): too late for this process, but child processes still get ours
#: (the benchmarks' release children peaked at 16 GB instead of 10 GB at 10^7 rows)
POLARS_ALLOCATOR_DEFAULT = "dirty_decay_ms:500,muzzy_decay_ms:-1"
for _name, _value in ALLOCATOR_ENV.items():
    _current = os.environ.get(_name)
    if _current is None:
        os.environ[_name] = _value
    elif _current == POLARS_ALLOCATOR_DEFAULT:
        os.environ[_name] = f"{_current},{_value}"

#: every public name of the API and the stage module that defines it
API = {"release": "release.api", "Release": "release.api",
       "open_artifact": "decode.api", "Artifact": "decode.api",
       "audit_report": "audits.api", "audit_mechanism": "audits.api", "Report": "audits.api",
       "approve": "selpe_audit.review.approval",
       "generate_keypair": "selpe_audit.artifact.signing", "UserError": "selpe_audit.errors"}

__all__ = ["__version__", *API]


def __getattr__(name: str) -> Any:
    """``selpe_audit.release`` and the rest: the stage's function, imported on first use."""
    if name not in API:
        raise AttributeError(f"module 'selpe_audit' has no attribute '{name}'")
    value = getattr(importlib.import_module(API[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *API})
