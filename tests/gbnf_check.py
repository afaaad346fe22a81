"""Check texts against a GBNF grammar with llama.cpp's own grammar engine, without inference.

Tests use this to show that our grammars accept exactly the records the JSON Schema
accepts. It runs the same code that constrains generation (the grammar sampler), fed the
tokens of the text one at a time, so what it says is what decoding will do. Only the
model's vocabulary is loaded (``vocab_only``), which takes well under a second.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
from pathlib import Path
from typing import Any

from selpe_audit.llm.models import default_llm_path, llama_backend


class GrammarChecker:
    """Accept/reject texts under GBNF grammars using a model's vocabulary and tokenizer."""

    def __init__(self, path: str | Path | None = None) -> None:
        lc = llama_backend(quiet=True)
        self.lc = lc
        p = default_llm_path() if path is None else Path(path)
        params = lc.llama_model_default_params()
        params.vocab_only = True
        self._model = lc.llama_model_load_from_file(str(p).encode("utf-8"), params)
        if not self._model:
            raise ValueError(f"{p}: cannot load the vocabulary")
        self.vocab = lc.llama_model_get_vocab(self._model)
        self.eos = int(lc.llama_vocab_eos(self.vocab))
        self._cell = (lc.llama_token_data * 1)()
        self._array = lc.llama_token_data_array(self._cell, 1, -1, False)

    def close(self) -> None:
        if self._model:
            self.lc.llama_model_free(self._model)
            self._model = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def tokens(self, text: str) -> list[int]:
        raw = text.encode("utf-8")
        cap = len(raw) + 8
        buf = (self.lc.llama_token * cap)()
        n = self.lc.llama_tokenize(self.vocab, raw, len(raw), buf, cap, False, False)
        if n < 0:
            raise ValueError("tokenization overflow")
        return list(buf[:n])

    def sampler(self, grammar: str) -> Any:
        """A fresh grammar sampler; ValueError if llama.cpp cannot parse the grammar."""
        smpl = self.lc.llama_sampler_init_grammar(self.vocab, grammar.encode("utf-8"), b"root")
        if not smpl:
            raise ValueError("llama.cpp rejected the grammar")
        return smpl

    def allows(self, smpl: Any, token: int) -> bool:
        """Whether the grammar, in its current state, allows ``token`` next."""
        self._cell[0].id, self._cell[0].logit, self._cell[0].p = token, 0.0, 0.0
        self._array.size, self._array.selected, self._array.sorted = 1, -1, False
        self.lc.llama_sampler_apply(smpl, ctypes.byref(self._array))
        return not math.isinf(self._cell[0].logit)

    def accepts(self, grammar: str, text: str) -> bool:
        """True if ``text`` is a complete sentence of ``grammar``."""
        smpl = self.sampler(grammar)
        try:
            for tok in self.tokens(text):
                if not self.allows(smpl, tok):
                    return False
                self.lc.llama_sampler_accept(smpl, tok)
            return self.allows(smpl, self.eos)
        finally:
            self.lc.llama_sampler_free(smpl)
