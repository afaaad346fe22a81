"""What a privacy reviewer sees: the view model (warnings, counts, exemplars), the terminal
view, the self-contained review.html page, and approval signatures.

Reads a verified artifact through `selpe_audit.artifact`; never reads private rows.
"""
