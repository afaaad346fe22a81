"""The LLM decoder on a model-mode artifact (issue #20): fields from the released model, the
LLM writes only the free text. Uses the small released model of `test_model_decoder` (OpenDP's
own ``Fixed`` release) and, in the slow tests, the bundled GGUF model."""

from __future__ import annotations

import pytest
from test_model_decoder import SCHEMA, _doc, _released, release  # noqa: F401 (a fixture)

from decode.hybrid import HybridDecoder, placeholder_words
from decode.model import ModelDecoder
from selpe_audit.llm import prompts

TEXT = "note"


@pytest.fixture(scope="module")
def released(release):  # noqa: F811 (the imported fixture)
    table, block = release
    return _released(_doc(block, table))


def test_placeholders_are_the_schemas_own_words():
    words = placeholder_words(SCHEMA)
    assert {"free text", "note", "colour", "red", "calm", "class"} <= words


def test_the_text_prompt_carries_fields_topic_texts_and_no_text_slot(released):
    rec, _ = ModelDecoder(released, seed=1).draw(2, 0)
    f = SCHEMA.field(TEXT)
    prefix = prompts.text_prefix(SCHEMA, f, class_value=2, examples=[rec])
    assert f'note: "{rec[TEXT]}"' in prefix and "Every record below has class: 2." in prefix
    suffix = prompts.text_suffix(SCHEMA, f, rec, ["a sore throat", "throat hurts"])
    assert suffix.endswith('note: "') and '"a sore throat"; "throat hurts"' in suffix
    assert f"colour: {rec['colour']}" in suffix and rec[TEXT] not in suffix
    assert "(free text)" not in prefix + suffix  # the field guide the small model copied


@pytest.fixture(scope="module")
def llm():
    from selpe_audit.llm.models import load_llm

    return load_llm(seed=0)


@pytest.mark.slow
def test_the_llm_writes_text_only_and_never_changes_a_field(released, llm):
    model = ModelDecoder(released, seed=5)
    dec = HybridDecoder(released, llm, seed=5)
    out: list[dict] = []
    dec.generate(2, 0, 10, out.append)
    assert len(out) == 10
    validator = SCHEMA.record_validator()
    for i, rec in enumerate(out):
        expected = model.record(2, i)
        assert {k: v for k, v in rec.items() if k != TEXT} == \
            {k: v for k, v in expected.items() if k != TEXT}
        assert dec.acceptable(SCHEMA.field(TEXT), rec[TEXT])
        assert not list(validator.iter_errors(rec))
    s = dec.stats
    assert s.records + s.fallbacks == 10 and s.context_tokens > 0
    assert s.records >= 5  # most texts are the LLM's own, not the topic's fallback text
    # resuming mid-chunk regenerates that chunk and continues the same stream
    again: list[dict] = []
    HybridDecoder(released, llm, seed=5).generate(2, 3, 10, again.append)
    assert again == out[3:]
