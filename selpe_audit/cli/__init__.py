"""The console script ``selpe-audit``: the `command.Command` shape, the entry-point registry
(`main`), keygen and doctor.

May import llm, kernel, artifact, schema and errors. Every command - review, demo and the
stage packages' (release, decode, audits) - plugs in through the ``selpe_audit.commands``
entry points, never by import, so the CLI depends on no stage and on no UI.
"""
