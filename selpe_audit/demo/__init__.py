"""The fictional ED-triage demo: the seeded record generator and the ``demo`` command that
drives every stage on it through the CLI, as a user would.

The top layer of the core: may import any other part of it (never a stage package).
"""
