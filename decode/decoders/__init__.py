"""The decoders, one module each, in a registry (`registry`): `marginals` (the no-LLM
baseline), `model` (whole records from the released counts model) and `llm` (the local LLM:
`hybrid` on an artifact with a counts model, else `llm`'s two-stage records). Importing the
package registers them."""

from decode.decoders import hybrid, marginals, model
from decode.decoders.registry import DecoderSpec, RecordSource, decoder_names, get, register

__all__ = ["DecoderSpec", "RecordSource", "decoder_names", "get", "hybrid", "marginals", "model",
           "register"]
