"""The record grammar accepts exactly the schema-valid records in our layout.

The oracle is independent of the grammar code: ``json.loads`` + the JSON Schema validator +
"the text is the canonical rendering of what it parses to". The grammar is run by llama.cpp's
own grammar engine (the sampler that constrains decoding), fed the text's tokens; only the
model's vocabulary is loaded, no inference runs.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from selpe_audit.errors import UserError
from selpe_audit.llm.grammar import (
    RecordLayout,
    decimal_range_gbnf,
    format_scaled,
    gbnf_literal,
    has_excluded_chars,
    integer_range_gbnf,
    json_text,
    max_record_chars,
    parse_record,
    record_gbnf,
    render_record,
    string_gbnf,
)
from selpe_audit.schema import DRAFT_2020_12, Schema, parse_schema
from tests.gbnf_check import GrammarChecker

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def checker() -> GrammarChecker:
    return GrammarChecker()


# ----- an oracle that does not use the grammar code ---------------------------------------

def canonical(record: dict[str, Any], schema: Schema) -> str:
    """Our layout, written independently of grammar.render_record."""
    parts = []
    for f in schema.record_fields:
        v = record[f.name]
        if f.kind == "numeric" and not f.is_integer:
            d = Decimal(repr(float(v))).quantize(Decimal(1).scaleb(-f.precision))
            text = format(d, "f")
            text = "0" + text[2:] if text.startswith("-0") and not d else text
            text = text.lstrip("-") if d.is_zero() else text
        elif f.json_type == "integer" and type(v) is not int:
            text = "not canonical: integers are written without a fraction"
        else:
            text = json.dumps(v, ensure_ascii=False)
        parts.append(json.dumps(f.name, ensure_ascii=False) + ":" + text)
    return "{" + ",".join(parts) + "}"


def _refuse(name: str) -> None:
    raise ValueError(name)


def oracle(text: str, schema: Schema) -> bool:
    """Valid JSON, valid under the schema, writable without escapes, and in canonical form.

    Strict JSON: Python's json reads NaN, and NaN passes minimum/maximum checks.
    """
    try:
        value = json.loads(text, parse_constant=_refuse)
    except ValueError:
        return False
    if not isinstance(value, dict) or not schema.record_validator().is_valid(value):
        return False
    if any(has_excluded_chars(value[f.name]) for f in schema.by_kind("text")):
        return False
    return canonical(value, schema) == text


# ----- random schemas ----------------------------------------------------------------------

SPECIAL = '"\\\n\t\x00\x7f/ é€😀<>'
chars = st.one_of(st.sampled_from(SPECIAL),
                  st.characters(blacklist_categories=("Cs",), max_codepoint=0x1FFFF))
enum_strings = st.lists(st.text(chars, max_size=6), min_size=1, max_size=5, unique=True)
enum_ints = st.lists(st.integers(-1000, 1000), min_size=1, max_size=5, unique=True)


@st.composite
def integer_spec(draw: Any) -> dict:
    lo = draw(st.integers(-10**6, 10**6))
    width = draw(st.one_of(st.integers(1, 30), st.integers(1, 2 * 10**6)))
    return {"type": "integer", "minimum": lo, "maximum": lo + width}


@st.composite
def number_spec(draw: Any) -> dict:
    precision = draw(st.integers(0, 3))
    scale = draw(st.integers(0, 4))
    lo = draw(st.integers(-10**5, 10**5))
    width = draw(st.integers(1, 10**5))
    to_float = lambda k: float(Decimal(k).scaleb(-scale))  # noqa: E731
    lo_f, hi_f = to_float(lo), to_float(lo + width)
    assume(lo_f < hi_f)
    step = Decimal(1).scaleb(-precision)
    # Some numeral with `precision` decimals must fit (else the grammar refuses the schema).
    assume(Decimal(repr(lo_f)).quantize(step, "ROUND_CEILING") <= Decimal(repr(hi_f)))
    return {"type": "number", "minimum": lo_f, "maximum": hi_f, "x-precision": precision}


@st.composite
def text_spec(draw: Any) -> dict:
    lo = draw(st.integers(0, 4))
    hi = draw(st.integers(max(1, lo), lo + 12))
    return {"type": "string", "minLength": lo, "maxLength": hi}


field_spec = st.one_of(integer_spec(), number_spec(), text_spec(),
                       enum_strings.map(lambda v: {"type": "string", "enum": v}),
                       enum_ints.map(lambda v: {"type": "integer", "enum": v}))
field_names = st.lists(st.text(chars, min_size=1, max_size=6), min_size=1, max_size=4,
                       unique=True)


@st.composite
def schemas(draw: Any) -> Schema:
    names = [n for n in draw(field_names) if n != "label"]
    props = {n: draw(field_spec) for n in names}
    label_values = draw(st.one_of(
        st.lists(st.text(chars, max_size=5), min_size=2, max_size=4, unique=True).map(
            lambda v: {"type": "string", "enum": v}),
        st.lists(st.integers(-20, 20), min_size=2, max_size=4, unique=True).map(
            lambda v: {"type": "integer", "enum": v})))
    order = draw(st.permutations([*names, "label"]))
    props["label"] = label_values
    raw = {"$schema": DRAFT_2020_12, "type": "object", "x-label": "label",
           "properties": {n: props[n] for n in order}, "required": list(order),
           "additionalProperties": False}
    return parse_schema(raw)


# ----- candidate values and texts ------------------------------------------------------------

def value_candidates(f: Any, draw: Any) -> list[str]:
    """Value texts around every edge of the field's domain, valid and invalid."""
    if f.kind == "categorical":
        good = [json.dumps(v, ensure_ascii=False) for v in f.enum]
        bad = [g[:-1] for g in good if len(g) > 1] + [g + "0" for g in good] + ['"zz"', "7"]
        return good + bad + ["true", "null", "1.0"]
    if f.kind == "text":
        alphabet = draw(st.sampled_from(["ab ", "aé€😀", 'a"', "a\\", "a\n", "a\x7f"]))
        texts = []
        for n in {f.min_length - 1, f.min_length, f.max_length, f.max_length + 1}:
            if n >= 0:
                s = "".join(alphabet[i % len(alphabet)] for i in range(n))
                texts.append(json.dumps(s, ensure_ascii=False))
        return [*texts, "1", "null", '"a\\u0062"']
    if f.is_integer:
        lo, hi = int(f.minimum), int(f.maximum)
        mid = draw(st.integers(lo, hi))
        nums = {lo - 1, lo, lo + 1, hi - 1, hi, hi + 1, mid, 0, -1, 9, 10, 99, 100}
        edges = [str(v) for v in nums] + [str(10**k) for k in range(1, 8)]
        return [*edges, "-0", "00", "01", "+1", f"{lo}.0", "1e1", '"1"']
    p = f.precision
    k_lo = int((Decimal(repr(f.minimum)) * 10**p).to_integral_value())
    k_hi = int((Decimal(repr(f.maximum)) * 10**p).to_integral_value())
    ks = {k + d for k in (k_lo, k_hi) for d in (-2, -1, 0, 1, 2)}
    ks |= {draw(st.integers(min(k_lo, k_hi), max(k_lo, k_hi))), 0, 1, -1}
    texts = [format_scaled(k, p) for k in ks]
    more = ["-0" + ("." + "0" * p if p else ""), "1e1", "NaN"]
    if p:
        more += [format_scaled(k_lo, p) + "0", format_scaled(k_lo, p)[:-1]]
    else:
        more += [f"{k_lo}.0"]
    return texts + more


def record_texts(schema: Schema, draw: Any) -> list[str]:
    """A valid record's text and many one-place mutations of it."""
    fields = schema.record_fields
    cands = {f.name: value_candidates(f, draw) for f in fields}
    base = {}
    for f in fields:
        valid = [c for c in cands[f.name] if _value_ok(f, c, schema)]
        base[f.name] = draw(st.sampled_from(valid)) if valid else None
    assume(all(v is not None for v in base.values()))

    def text(values: dict[str, str], order: list[str] | None = None, sep: str = ",",
             colon: str = ":") -> str:
        names = order or [f.name for f in fields]
        return "{" + sep.join(json.dumps(n, ensure_ascii=False) + colon + values[n]
                              for n in names) + "}"

    out = [text(base)]
    for f in fields:
        for c in cands[f.name]:
            out.append(text({**base, f.name: c}))
    names = [f.name for f in fields]
    out += [text(base, sep=", "), text(base, colon=": "), " " + text(base), text(base) + " ",
            text(base)[:-1], text(base, names[:-1]), text(base, [*names, names[0]]),
            text(base)[:-1] + ',"extra":1}', json.dumps([1])]
    if len(names) > 1:
        out.append(text(base, [names[1], names[0], *names[2:]]))
    return out


def _value_ok(f: Any, value_text: str, schema: Schema) -> bool:
    """Whether this one value text is valid in context (checked through the oracle)."""
    probe = {g.name: None for g in schema.record_fields}
    try:
        v = json.loads(value_text, parse_constant=_refuse)
    except ValueError:
        return False
    probe[f.name] = v
    sub = {"type": "object", "properties": {f.name: schema.raw["properties"][f.name]}}
    from jsonschema import Draft202012Validator

    if not Draft202012Validator(sub).is_valid({f.name: v}):
        return False
    if f.kind == "text" and has_excluded_chars(v):
        return False
    return canonical_value(f, v) == value_text


def canonical_value(f: Any, v: Any) -> str:
    fake = Schema(raw={}, name="x", fields=(f,), label=f.name, id_field=None)
    body = canonical({f.name: v}, fake)
    return body[len(json.dumps(f.name, ensure_ascii=False)) + 2:-1]


# ----- the property tests ---------------------------------------------------------------------

@SETTINGS
@given(data=st.data())
def test_grammar_accepts_exactly_the_valid_records(data: Any, checker: GrammarChecker) -> None:
    schema = data.draw(schemas())
    grammar = record_gbnf(schema)
    texts = record_texts(schema, data.draw)
    assert any(oracle(t, schema) for t in texts)
    for t in texts:
        assert checker.accepts(grammar, t) == oracle(t, schema), t


@SETTINGS
@given(data=st.data())
def test_fixed_label_and_leading_space(data: Any, checker: GrammarChecker) -> None:
    schema = data.draw(schemas())
    cls = data.draw(st.sampled_from(schema.classes))
    grammar = record_gbnf(schema, cls, leading_space=True)
    for t in record_texts(schema, data.draw):
        bare = t[1:] if t.startswith(" ") else t
        want = oracle(bare, schema) and json.loads(bare)["label"] == cls
        assert checker.accepts(grammar, t) == want, t
        if want and t == bare:
            assert checker.accepts(grammar, " " + t)
            assert not checker.accepts(grammar, "  " + t)


@SETTINGS
@given(data=st.data())
def test_render_and_forced_text(data: Any) -> None:
    """render_record writes the canonical text; forced text is always what follows."""
    schema = data.draw(schemas())
    valid = [t for t in record_texts(schema, data.draw) if oracle(t, schema)]
    for t in valid:
        record = parse_record(t, schema)
        assert record is not None
        assert render_record(record, schema) == t
        assert len(t) <= max_record_chars(schema)
        layout = RecordLayout(schema, record["label"])
        free = RecordLayout(schema)
        for text in (t, " " + t):
            for i in range(len(text) + 1):
                assert text[i:].startswith(layout.forced(text[:i])), (text, i)
                assert text[i:].startswith(free.forced(text[:i])), (text, i)


# ----- digit ranges, exhaustively and at scale --------------------------------------------

def to_regex(expr: str) -> re.Pattern[str]:
    """Our numeric GBNF (literals, [a-b], {n}, |, parentheses) as a Python regex."""
    parts = re.findall(r'"[^"]*"|\[[^\]]*\]|\{\d+\}|[()|]', expr)
    return re.compile("".join(re.escape(p[1:-1]) if p.startswith('"') else p for p in parts))


def test_integer_ranges_exhaustive() -> None:
    junk = ["-0", "00", "01", "-01", "+1", "", "-"]
    for lo in range(-30, 31):
        for hi in range(lo, 121):
            rx = to_regex(integer_range_gbnf(lo, hi))
            for v in range(-40, 131):
                assert bool(rx.fullmatch(str(v))) == (lo <= v <= hi), (lo, hi, v)
            assert not any(rx.fullmatch(j) for j in junk)


def test_decimal_ranges_exhaustive() -> None:
    for p in (1, 2):
        step = 10**p
        for k_lo in range(-25, 26, 3):
            for k_hi in range(k_lo, k_lo + 140, 7):
                lo, hi = k_lo / step, k_hi / step
                rx = to_regex(decimal_range_gbnf(lo, hi, p))
                for k in range(k_lo - 30, k_hi + 30):
                    text = format_scaled(k, p)
                    assert bool(rx.fullmatch(text)) == (lo <= float(text) <= hi), (lo, hi, text)
                assert not rx.fullmatch("-" + format_scaled(0, p))


@settings(max_examples=300, deadline=None)
@given(lo=st.integers(-10**12, 10**12), width=st.integers(0, 10**12), data=st.data())
def test_integer_ranges_at_scale(lo: int, width: int, data: Any) -> None:
    hi = lo + width
    rx = to_regex(integer_range_gbnf(lo, hi))
    probes = {lo - 1, lo, lo + 1, hi - 1, hi, hi + 1, data.draw(st.integers(lo, hi))}
    probes |= {s * (10**k + d) for k in range(14) for d in (-1, 0) for s in (1, -1)}
    for v in probes:
        assert bool(rx.fullmatch(str(v))) == (lo <= v <= hi), (lo, hi, v)


def test_integer_range_in_llama_cpp(checker: GrammarChecker) -> None:
    """The regex reading above matches what llama.cpp makes of the same GBNF."""
    for lo, hi in [(-57, 1234), (0, 0), (-9, -1), (7, 7), (95, 105), (-1000, 1000)]:
        grammar = "root ::= " + integer_range_gbnf(lo, hi) + "\n"
        for v in [lo - 1, lo, hi, hi + 1, (lo + hi) // 2, 0, -1, 10, 100]:
            assert checker.accepts(grammar, str(v)) == (lo <= v <= hi)
        assert not checker.accepts(grammar, "-0")


# ----- strings and literals ---------------------------------------------------------------

@pytest.mark.parametrize(("lo", "hi"), [(0, 1), (3, 120), (0, 1000), (0, 1001), (1200, 2500)])
def test_string_lengths(lo: int, hi: int, checker: GrammarChecker) -> None:
    grammar = "root ::= " + string_gbnf(lo, hi) + "\n"
    for n in {lo - 1, lo, lo + 1, hi - 1, hi, hi + 1, (lo + hi) // 2}:
        if n >= 0:
            assert checker.accepts(grammar, '"' + "é" * n + '"') == (lo <= n <= hi), n
    for bad in ['"a\\"b"', '"a\\\\"', '"a\nb"', '"a\x7fb"', '"a\x1fb"']:
        assert not checker.accepts(grammar.replace(f"{{{lo},", "{0,"), bad)


def test_literals_escape_everything(checker: GrammarChecker) -> None:
    for s in ['"', "\\", 'a"b\\c', "\n\t\x00\x7f", "é€😀", "[x]", "<start_of_turn>", "\u2028"]:
        text = json_text(s)
        grammar = "root ::= " + gbnf_literal(text) + "\n"
        assert checker.accepts(grammar, text)
        assert not checker.accepts(grammar, text + "x")
        assert json.loads(text) == s


def test_lone_surrogate_is_escaped() -> None:
    assert json_text("a\ud800") == '"a\\ud800"'


def test_unknown_class_is_refused(demo_schema: Schema) -> None:
    with pytest.raises(ValueError):
        record_gbnf(demo_schema, 9)


def test_number_range_without_numerals_is_refused() -> None:
    raw = {"$schema": DRAFT_2020_12, "type": "object", "x-label": "y",
           "properties": {"x": {"type": "number", "minimum": 0.001, "maximum": 0.004},
                          "y": {"type": "integer", "enum": [0, 1]}},
           "required": ["x", "y"], "additionalProperties": False}
    with pytest.raises(UserError, match="x-precision"):
        record_gbnf(parse_schema(raw))


# ----- parsing ------------------------------------------------------------------------------

def test_parse_record(demo_schema: Schema) -> None:
    from conftest import good_row

    row = {k: v for k, v in good_row().items() if k != "patient_id"}
    text = render_record(row, demo_schema)
    assert parse_record(text, demo_schema) == row
    assert parse_record(" " + text, demo_schema) == row
    assert parse_record(text[:-1], demo_schema) is None
    assert parse_record(text[:-1] + ',"age":44}', demo_schema) is None  # duplicate key
    assert parse_record(text.replace('"age":44', '"age":NaN'), demo_schema) is None
    assert parse_record(text.replace('"age":44', '"age":106'), demo_schema) is None
    assert parse_record("[1]", demo_schema) is None
    assert parse_record("", demo_schema) is None


def test_demo_grammar_examples(demo_schema: Schema, checker: GrammarChecker) -> None:
    from conftest import good_row

    row = {k: v for k, v in good_row().items() if k != "patient_id"}
    grammar = record_gbnf(demo_schema)
    text = render_record(row, demo_schema)
    assert checker.accepts(grammar, text)
    for old, new in [("37.1", "37.10"), ("37.1", "42.1"), ('"acuity":4', '"acuity":6'),
                     ('"female"', '"Female"'), ('"age":44', '"age":044')]:
        assert not checker.accepts(grammar, text.replace(old, new))
    assert checker.accepts(grammar, text.replace("37.1", "42.0"))
    assert checker.accepts(grammar, text.replace("37.1", "34.0"))
    assert not checker.accepts(grammar, text.replace("37.1", "33.9"))
