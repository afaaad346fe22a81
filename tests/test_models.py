"""The process's models (`selpe_audit.models`): each loaded once, shared by every caller.

The session-wide guard is `conftest._model_loads`: it counts every LLM context and embedder
constructed in this session, and the session fails at its end if any was loaded twice.
"""

from __future__ import annotations

import os

import pytest
from conftest import MODEL_LOADS

from selpe_audit.models import shared


@pytest.mark.model
def test_the_session_loads_each_model_once(models, llm, embedder):
    assert models is shared()
    assert models.llm() is llm and models.embedder() is embedder
    assert models.llm(None, gpu_layers=0, n_ctx=4096, n_seq=4) is llm
    loads = {k: n for k, n in MODEL_LOADS.items()
             if k[0] == "llm" and k[1].startswith(llm.info.path.rsplit("/", 1)[-1] + " ")
             and "n_ctx=4096 n_seq=4 " in k[1]}
    assert list(loads.values()) == [1], loads  # the counter sees the one load
    assert sum(1 for kind, _ in MODEL_LOADS if kind == "embedder") >= 1


def test_a_worker_keeps_to_its_own_cpu():
    """Under `make test`'s pytest workers each keeps to one CPU of its own (tests/conftest.py),
    which llama.cpp's and torch's thread counts follow: two workers never share a core."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("one process: no pytest-xdist workers")
    assert len(os.sched_getaffinity(0)) == 1
    import torch

    assert torch.get_num_threads() == 1
