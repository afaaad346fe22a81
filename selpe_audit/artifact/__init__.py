"""The release artifact: canonical JSON, Ed25519 signing, the document's JSON Schema, the
derived guarantees, and the typed read-only view that review, decode and audits read.

Imports only `selpe_audit.schema` and `selpe_audit.errors` from the core: everything else in
the core may depend on the artifact, never the other way round.
"""
