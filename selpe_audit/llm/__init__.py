"""The local LLM engine: model files and hashes, the GBNF grammar built from a schema,
prompts, the llama.cpp batch engine (`engine`) and two-stage record generation
(`generation`).

Public inputs only: nothing here ever sees a private row. May import the schema and errors
only (independent of `selpe_audit.kernel`).
"""
