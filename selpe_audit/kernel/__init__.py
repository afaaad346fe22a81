"""Embeddings and SelPE's multi-channel distance kernel.

Inside the enclave these functions see private texts; they keep nothing beyond the call that
needs it. May import the schema and errors only (independent of `selpe_audit.llm`).
"""
