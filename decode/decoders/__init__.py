"""The decoders, one module each, in a registry (`registry`): `marginals` (the no-LLM
baseline), `model` (whole records from the released counts model) and `llm` (the local LLM:
`hybrid` on an artifact with a counts model, else `llm`'s two-stage records). The registry
imports them at its first lookup."""

from decode.decoders.registry import DecoderSpec, RecordSource, decoder_names, get, register

__all__ = ["DecoderSpec", "RecordSource", "decoder_names", "get", "register"]
