"""The release artifact: canonical JSON, Ed25519 signing, the document's JSON Schema, the
selection modes' public descriptors, the derived guarantees, and `view.ReleaseView`, the typed
read-only view that review, decode and the audits read instead of the raw dictionary.

May import `selpe_audit.schema` and `selpe_audit.errors` only (import-linter's layers
contract): everything else in the core may depend on the artifact, never the other way round.
"""
