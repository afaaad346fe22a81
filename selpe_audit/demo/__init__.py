"""The fictional ED-triage demo: the seeded record generator and the ``demo`` command that
drives every stage (through the CLI, as a user would) on it.
"""
