"""The decoders: one protocol, one registry.

A decoder is one module in this package that ends by registering its `DecoderSpec`: its
name, its ``--decoder`` help, what it needs (the LLM, a counts model in the artifact), and
how to build it; `DECODERS` names the modules and imports them at its first lookup. The
CLI's choices and help, the settings check, the pipeline's model loading and the
provenance all read the registry, so a new decoder changes nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from selpe_audit.registry import Registry

if TYPE_CHECKING:
    from decode.released import Released
    from selpe_audit.llm.models import LLM


class RecordSource(Protocol):
    """A decoder: a deterministic stream of valid records per class."""

    name: str
    validity: float

    def describe(self) -> dict[str, Any]: ...

    def generate(self, class_value: Any, start: int, total: int, on_record: Any) -> None: ...


#: build(released, settings, seed, llm): settings is the decode's `DecodeSettings`; llm is
#: the loaded model when the spec needs one, else None.
Build = Callable[["Released", Any, int, "LLM | None"], RecordSource]


@dataclass(frozen=True)
class DecoderSpec:
    """What the CLI, the settings check and the pipeline know of a decoder.

    ``needs_llm``: the pipeline loads the LLM (once per decode) and records the prompt
    templates' hash; such a decoder is slow, so SelectTop ranks its candidates by default
    and its checkpoint syncs every record. ``needs_counts_model``: it refuses an artifact
    without ``counts.model`` (released in the marginals counts mode)."""

    name: str
    help: str
    build: Build
    needs_llm: bool = False
    needs_counts_model: bool = False


#: the decoders, one module each
DECODERS: Registry[DecoderSpec] = Registry(
    "decoder", builtins=("decode.decoders.marginals", "decode.decoders.model",
                         "decode.decoders.llm"))


def register(spec: DecoderSpec) -> DecoderSpec:
    """Make ``spec`` a ``--decoder`` choice (a name once, `Registry.add`)."""
    return DECODERS.add(spec.name, spec, stacklevel=2)


def decoder_names() -> tuple[str, ...]:
    return tuple(sorted(DECODERS.names()))


def get(name: str) -> DecoderSpec:
    """The decoder called ``name``; ValueError naming the known ones otherwise."""
    return DECODERS.get(name)


def help_text(default: str) -> str:
    """The ``--decoder`` help, from every registered decoder's own words."""
    return "; ".join(f"{n}{' (default)' if n == default else ''}: {DECODERS.get(n).help}"
                     for n in decoder_names())
