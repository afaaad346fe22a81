"""The models a process loads once and shares: the local LLM and the embedder.

Loading takes seconds (a GGUF into llama.cpp; torch and a sentence-transformers model), and a
test session, a benchmark or the demo releases and decodes many times in one process. A
`Models` loads each model on first use and hands the same object to every later caller that
asks for the same one. `run_release` and `run_decode` take one; by default they use the
process's own (`shared`), so a CLI command loads each model at most once and so does a test
session.

Sharing is safe because nothing a model holds is tied to one caller: every generation call
carries its own seed (an LLM's load-time seed is never used by the release or decode), the
LLM's prompt-prefix cache is checked token by token before reuse, and the embedder's cache of
private texts is emptied by the release that filled it.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # loading either pulls in llama.cpp or torch: only when a model is asked for
    from selpe_audit.kernel.embeddings import Embedder
    from selpe_audit.llm.models import LLM


class Models:
    """One LLM per (file, GPU layers, context size, sequences) and one embedder per folder."""

    def __init__(self) -> None:
        self._llms: dict[tuple[str | None, int, int, int], LLM] = {}
        self._embedders: dict[str | None, Embedder] = {}

    def llm(self, path: str | Path | None = None, *, gpu_layers: int = 0, n_ctx: int = 4096,
            n_seq: int = 4) -> LLM:
        """The GGUF at ``path`` (None: the default model), loaded on first use."""
        key = (None if path is None else str(Path(path).expanduser().resolve()), gpu_layers,
               n_ctx, n_seq)
        if key not in self._llms:
            from selpe_audit.llm.models import load_llm

            self._llms[key] = load_llm(path, n_gpu_layers=gpu_layers, n_ctx=n_ctx, n_seq=n_seq)
        return self._llms[key]

    def embedder(self, model: str | Path | None = None) -> Embedder:
        """The sentence-transformers folder ``model`` (None: the default), loaded on first
        use."""
        key = None if model is None else str(Path(model).expanduser().resolve())
        if key not in self._embedders:
            from selpe_audit.kernel.embeddings import Embedder

            self._embedders[key] = Embedder(model)
        return self._embedders[key]

    def forget_private_texts(self) -> None:
        """Empty every embedder's cache of private texts (a release's last step)."""
        for embedder in self._embedders.values():
            embedder.private_view().clear_cache()


@functools.cache
def shared() -> Models:
    """This process's models: what `run_release`, `run_decode` and the audits use unless a
    caller hands them its own."""
    return Models()
