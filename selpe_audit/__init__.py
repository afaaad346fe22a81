"""selpe-audit: shared core (schema, artifact, signing, generation, embeddings, kernel, CLI).

This package holds no code that reads private rows and imports no stage package
(``release``, ``decode``, ``audits``); tests/test_import_boundaries.py enforces that.
"""

import os

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
