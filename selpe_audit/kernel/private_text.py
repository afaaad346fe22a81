"""The one path private texts take into an embedder (the kernel's private features and the
release's topic assignment): each text's vector a function of that text alone, never of
the texts beside it in a batch."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from selpe_audit.kernel.embeddings import PrivateEncoder


class TextEncoder(Protocol):
    """Anything that embeds a list of texts as unit rows (an `Embedder` or a view of one)."""

    def encode(self, texts: list[str]) -> np.ndarray: ...


class OneAtATime:
    """A plain encoder asked for one text per call, so no text has batch neighbours."""

    def __init__(self, encoder: TextEncoder) -> None:
        self._encoder = encoder

    def encode(self, texts: list[str]) -> np.ndarray:
        """``(n, dim)`` float32 rows; ``(0, 0)`` for no text (the encoder is never asked)."""
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.concatenate([np.asarray(self._encoder.encode([t]), dtype=np.float32)
                               for t in texts])


def private_encoder(encoder: Any) -> TextEncoder:
    """The encoder for private texts: a `PrivateEncoder` as it is, an embedder's private
    view (`Embedder.private_view`: fixed-shape batches where checked invariant, its own
    cache), else each text in a call of its own."""
    if isinstance(encoder, PrivateEncoder):
        return encoder
    view = getattr(encoder, "private_view", None)
    return view() if view is not None else OneAtATime(encoder)
