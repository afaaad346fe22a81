"""The LLM decoder on a model-mode artifact (issue #20): fields from the released model, the
LLM writes only the free text. Uses the small released model of `test_model_decoder` (OpenDP's
own ``Fixed`` release) and, in the `model` tests, the bundled GGUF model."""

from __future__ import annotations

import pytest
from test_model_decoder import SCHEMA, model_doc, opendp_release, released_from

from decode.decoders.hybrid import HybridDecoder, placeholder_words
from decode.decoders.model import ModelDecoder
from selpe_audit.llm import prompts
from selpe_audit.llm.text import plain_words, released_terms

TEXT = "note"


@pytest.fixture(scope="module")
def released():
    table, block = opendp_release()
    return released_from(model_doc(block, table))


def test_placeholders_are_the_schemas_own_words():
    words = placeholder_words(SCHEMA)
    assert {"free text", "note", "colour", "red", "calm", "class"} <= words


def test_a_text_of_only_the_fields_description_is_a_placeholder():
    """The 270M model wrote "film critic's review" for a field described as "a film critic's
    review sentence"; one such word, or a text with a word of its own, is a text."""
    from selpe_audit.llm.text import only_described_words
    from selpe_audit.schema import Field

    f = Field(name="review", kind="text", json_type="string",
              description="a film critic's review sentence")
    for text in ("film critic's review", "A review sentence.", "critic's film"):
        assert only_described_words(f, text), text
    for text in ("film", "a dull film", "review of a film", "the critic's best film"):
        assert not only_described_words(f, text), text


def test_a_text_that_echoes_the_fields_line_is_refused():
    """The 270M model echoed its prompt ("film critic's review on film_has_plot: no"): a
    field's name with a colon, or an identifier joined by underscores, is refused."""
    from selpe_audit.llm.text import field_echo

    echo = field_echo(SCHEMA)
    for text in ("a sore throat; colour: red", "Colour : blue", "size_bin is 3", "film_plot: no"):
        assert echo.search(text), text
    for text in ("a red rash, colourful", "the size of it: large", "note the time"):
        assert not echo.search(text), text


@pytest.mark.slow
def test_the_text_prompt_carries_fields_topic_texts_and_no_text_slot(released):
    rec, _ = ModelDecoder(released, seed=1).draw(2, 0)
    f = SCHEMA.field(TEXT)
    prefix = prompts.text_prefix(SCHEMA, f, class_value=2, examples=[rec])
    assert f'note: "{rec[TEXT]}"' in prefix and "Every record below has class: 2." in prefix
    suffix = prompts.text_suffix(SCHEMA, f, rec, ["a sore throat", "throat hurts"])
    assert suffix.endswith('note: "') and '"a sore throat"; "throat hurts"' in suffix
    assert f"colour: {rec['colour']}" in suffix and rec[TEXT] not in suffix
    assert "(free text)" not in prefix + suffix  # the field guide the small model copied


@pytest.mark.model
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


def test_copy_bans_stop_a_copy_after_the_shared_tokens():
    from selpe_audit.llm.engine import AVOID_SHARED, copy_bans

    a, b = tuple(range(1, AVOID_SHARED + 3)), (*range(1, AVOID_SHARED + 1), 99)
    avoid = [a, b, (7, 8)]
    assert copy_bans(a[:AVOID_SHARED - 1], avoid) == []  # texts may start alike
    assert copy_bans(a[:AVOID_SHARED], avoid) == [a[AVOID_SHARED], 99]
    assert copy_bans(a[:AVOID_SHARED + 1], avoid) == [a[AVOID_SHARED + 1]]
    assert copy_bans((0, *a[1:AVOID_SHARED]), avoid) == []


@pytest.mark.model
def test_written_texts_copy_neither_the_prompt_nor_each_other(released, llm):
    """The bundled model repeats its few-shot texts word for word unless the engine stops a
    copy after `AVOID_SHARED` tokens (shown texts and texts already written in the call)."""
    from selpe_audit.llm.config import GenerationConfig
    from selpe_audit.llm.engine import AVOID_SHARED
    from selpe_audit.llm.text import Draft, TextWriter

    f = SCHEMA.field(TEXT)
    model = ModelDecoder(released, seed=2)
    shown = ["the throat has been sore and scratchy since the weekend",
             "the throat has been sore and dry since Monday morning"]
    examples = [{**model.draw(2, 100 + j)[0], TEXT: t} for j, t in enumerate(shown)]
    drafts = [Draft(i, dict(model.draw(2, i)[0])) for i in range(16)]
    writer = TextWriter(SCHEMA, llm, GenerationConfig(seed=0))
    failed = writer.write(f, 2, examples, drafts, base=11)
    texts = [d.values[f.name] for d in drafts if d not in failed]
    long = [t for t in texts if len(llm.tokenize(t)) > AVOID_SHARED]
    # 16 drafts: a build whose numerics make the model terse (2 long texts of 8 on one
    # machine) still leaves enough texts long enough to copy
    assert len(long) >= 4
    assert not set(long) & set(shown) and len(set(long)) == len(long)


@pytest.mark.model
def test_a_topic_shown_to_several_drafts_is_read_once(released, llm):
    """Drafts that show the same topic texts share one cached prefix (few-shot part + topic
    line): the topic line is evaluated once, not once per draft and attempt."""
    from selpe_audit.llm.config import GenerationConfig
    from selpe_audit.llm.text import Draft, TextWriter

    f = SCHEMA.field(TEXT)
    model = ModelDecoder(released, seed=3)
    common, alone = ("a sore throat", "throat hurts"), ("a cough at night",)
    writer = TextWriter(SCHEMA, llm, GenerationConfig(seed=0))
    head = writer._prefix(f, 2, [])
    heads = writer._topic_prefixes(f, head, [common, (), alone, common, common])
    assert list(heads) == [common]  # shown by two or more drafts
    line = llm.tokenize(prompts.text_topic(f, common))
    assert heads[common] == head + line
    drafts = [Draft(i, dict(model.draw(2, i)[0]), common) for i in range(6)]
    failed = writer.write(f, 2, [], drafts, base=4)
    own = [len(llm.tokenize(prompts.text_suffix(SCHEMA, f, d.values, ()))) for d in drafts]
    s = writer.stats
    assert len(failed) < 6
    assert s.prompt_tokens <= len(head) + len(line) + s.attempts * max(own)


def phrase_released(kind: str = "phrases"):
    """The small model's artifact with its text topics a DP vocabulary of ``kind``: topic 0
    "a sore throat" ("throat" for keywords), 1 "chest pain", 2 "other"."""
    from test_model_decoder import model_doc

    from release.phrases import PhraseVocabulary, phrase_topics

    table, block = opendp_release()
    doc = model_doc(block, table)
    terms = ("a sore throat", "chest pain") if kind == "phrases" else ("throat", "chest pain")
    vocab = PhraseVocabulary("note", kind, terms, (60, 50), 1.0, 1e-6, 1.0, 15, "laplace", 1)
    doc["counts"]["topics"] = {"note": phrase_topics(vocab)}
    return released_from(doc), vocab


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["phrases", "keywords"])
def test_an_other_records_text_may_not_be_a_released_term(kind):
    """No real text of a DP vocabulary's "other" topic is one of its released terms. Shown
    the three commonest keywords, the 270M model copied one (53 % of the reviews' LLM texts
    were "film", held by 15 % of real reviews). So an "other" draft refuses every released
    term and, for keywords, is shown none; a phrase field's is shown phrases as the domain's
    style. A keyword topic's draft refuses nothing but its opening alone."""
    released, vocab = phrase_released(kind)
    dec = HybridDecoder(released, None, seed=3)  # type: ignore[arg-type]  # drafts only
    f = SCHEMA.field(TEXT)
    values, _ = ModelDecoder(released, seed=3).draw(1, 0)
    other = dec._draft(f, 1, 0, dict(values), {TEXT: len(vocab.phrases)})
    assert other is not None and not other.opening
    assert other.refused == released_terms(released.topics[TEXT]) == {
        plain_words(t) for t in vocab.phrases}
    assert bool(other.topic_texts) is (kind == "phrases")
    assert dec.acceptable(f, "Chest pain.", refused=other.refused) is False
    assert dec.acceptable(f, "chest pain since this morning", refused=other.refused) is True
    first = dec._draft(f, 1, 0, {**values, TEXT: vocab.phrases[0]}, {TEXT: 0})
    if kind == "phrases":
        assert first is None  # the record keeps its released phrase
    else:
        assert first is not None and first.opening == "throat" and not first.refused


@pytest.mark.model
def test_a_released_phrase_is_kept_and_the_llm_writes_the_other_topic(llm):
    """By default a record whose topic is a released phrase keeps it (the model decoder's
    text) and the LLM writes only "other" records; with paraphrase_phrases it writes all."""
    released, vocab = phrase_released()
    n, other = 16, len(vocab.phrases)
    drawn = [ModelDecoder(released, seed=3).draw(1, i) for i in range(n)]
    n_other = sum(topics[TEXT] == other for _, topics in drawn)
    assert 0 < n_other < n  # this seed's stream has both kinds
    dec = HybridDecoder(released, llm, seed=3)
    out: list[dict] = []
    dec.generate(1, 0, n, out.append)
    for rec, (values, topics) in zip(out, drawn, strict=True):
        if topics[TEXT] != other:
            assert rec[TEXT] == values[TEXT] == vocab.phrases[topics[TEXT]]
    assert dec.stats.records + dec.stats.fallbacks == n_other
    assert dec.describe()["paraphrase_phrases"] is False
    every = HybridDecoder(released, llm, seed=3, paraphrase_phrases=True)
    every.generate(1, 0, n, [].append)
    assert every.stats.records + every.stats.fallbacks == n


@pytest.mark.model
def test_a_keyword_topics_text_starts_with_its_released_keyword(llm):
    """A long-text (keyword) topic's text keeps what the release says of it: it opens with
    the record's released keyword, as the model decoder wrote it, and the LLM writes on
    past it; an "other" record's text is no released term (but for a fallback)."""
    released, vocab = phrase_released("keywords")
    n, other = 16, len(vocab.phrases)
    drawn = [ModelDecoder(released, seed=3).draw(1, i) for i in range(n)]
    dec = HybridDecoder(released, llm, seed=3)
    out: list[dict] = []
    dec.generate(1, 0, n, out.append)
    keyword = [(rec[TEXT], values[TEXT]) for rec, (values, topics) in zip(out, drawn, strict=True)
               if topics[TEXT] != other]
    assert keyword and all(text.startswith(word) for text, word in keyword)
    s = dec.stats
    assert s.records + s.fallbacks == n
    # a text is the keyword alone (a punctuation mark at most after it) only where the LLM
    # never wrote a word past it: a fallback
    alone = [text.rstrip(".,;!") == word for text, word in keyword]
    assert sum(alone) <= s.fallbacks and not all(alone)
    assert all(text == word for (text, word), a in zip(keyword, alone, strict=True) if a)
    f = SCHEMA.field(TEXT)  # the writer's own check says so: a kept text is more than its opening
    assert all(dec.acceptable(f, text, word) is (not a)
               for (text, word), a in zip(keyword, alone, strict=True))
    terms = released_terms(released.topics[TEXT])
    others = [rec[TEXT] for rec, (_, topics) in zip(out, drawn, strict=True)
              if topics[TEXT] == other]
    assert sum(plain_words(t) in terms for t in others) + sum(alone) <= s.fallbacks
