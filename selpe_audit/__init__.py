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
for _name, _value in ALLOCATOR_ENV.items():
    os.environ.setdefault(_name, _value)
