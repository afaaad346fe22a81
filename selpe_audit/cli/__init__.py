"""The console script ``selpe-audit``: the command registry (entry points), keygen, doctor.

May import every other part of the shared core; the stage packages (release, decode, audits)
plug their commands in through the ``selpe_audit.commands`` entry points, never by import.
"""
