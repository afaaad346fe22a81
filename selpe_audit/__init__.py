"""selpe-audit: shared core (schema, artifact, signing, generation, embeddings, kernel, CLI).

This package holds no code that reads private rows and imports no stage package
(``release``, ``decode``, ``audits``); tests/test_import_boundaries.py enforces that.
"""

__version__ = "0.1.0"
