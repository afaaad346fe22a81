"""What a privacy reviewer sees: warnings and signature status (`view`), the terminal view
and approval (`terminal`), the self-contained review.html (`page`, with `charts` and
`style`).

Reads the artifact through `selpe_audit.artifact.view.ReleaseView` (tolerantly: a reviewer
sees a document before anyone trusts it); never reads private rows. May import cli (the
`Command` shape), artifact, schema and errors.
"""
