"""The local LLM engine: model files and hashes, the GBNF grammar built from a schema,
prompts, and batched constrained generation over llama.cpp.

Public inputs only: nothing here ever sees a private row. Imports the schema and errors.
"""
