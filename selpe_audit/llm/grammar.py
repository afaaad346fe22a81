"""GBNF grammars for schema records, built by hand from the schema.

llama-cpp-python's ``LlamaGrammar.from_json_schema`` ignores integer and number ranges and
lets raw control characters into strings, so we write the grammar ourselves. A record is
one JSON object in a fixed compact layout, fields in schema order::

    {"age":44,"sex":"female","temperature_c":37.1,...}

- enums: an alternation of the exact JSON text of each value;
- integers: the decimal numerals of exactly [minimum, maximum] (no leading zeros, no "-0");
- numbers: exactly ``x-precision`` decimals, and exactly the numerals whose value lies in
  [minimum, maximum] (the same digit-range construction on the scaled integer);
- strings: ``"`` + ``minLength``..``maxLength`` characters other than ``"``, ``\\``, DEL and
  control characters + ``"`` (no escapes, so the length in the text is the length of the value).

`render_record` writes a record in exactly that layout, so the grammar accepts a text if and
only if it is ``render_record(r)`` for a record ``r`` that the JSON Schema accepts and whose
strings avoid the excluded characters. Every generated record is still validated.

About 400 lines on purpose: the grammar, the renderer and the parser must agree character
for character, so they stay side by side.
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from typing import Any

from jsonschema import Draft202012Validator

from selpe_audit.errors import UserError
from selpe_audit.schema import Field, Schema

# One digit position: the inclusive range of digits allowed there.
Digit = tuple[int, int]
Pattern = list[Digit]

# llama.cpp refuses repetition counts above this; longer strings are built in chunks.
MAX_REPEAT = 1000
STRING_CHAR = r'[^"\\\x7F\x00-\x1F]'
_EXCLUDED = re.compile(r'["\\\x00-\x1F\x7F]')


# ----- JSON and GBNF text ------------------------------------------------------------------

def json_text(value: Any) -> str:
    """Compact JSON text of a scalar, non-ASCII kept as UTF-8 (lone surrogates escaped)."""
    text = json.dumps(value, ensure_ascii=False)
    return "".join(f"\\u{ord(c):04x}" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)


def gbnf_literal(text: str) -> str:
    """A GBNF string literal matching exactly ``text``; anything unusual is a hex escape."""
    out = []
    for c in text:
        cp = ord(c)
        if c in '"\\':
            out.append("\\" + c)
        elif 0x20 <= cp < 0x7F:
            out.append(c)
        elif cp < 0x80:
            out.append(f"\\x{cp:02X}")
        elif cp <= 0xFFFF:
            out.append(f"\\u{cp:04X}")
        else:
            out.append(f"\\U{cp:08X}")
    return '"' + "".join(out) + '"'


# ----- digit ranges -------------------------------------------------------------------------

def _same_length(lo: str, hi: str) -> list[Pattern]:
    """Disjoint digit patterns covering the numerals lo..hi, both of one length."""
    if not lo:
        return [[]]
    first_lo, first_hi = int(lo[0]), int(hi[0])
    if first_lo == first_hi:
        return [[(first_lo, first_lo), *rest] for rest in _same_length(lo[1:], hi[1:])]
    n = len(lo) - 1
    head: list[Pattern] = []
    tail: list[Pattern] = []
    if lo[1:] != "0" * n:
        head = [[(first_lo, first_lo), *rest] for rest in _same_length(lo[1:], "9" * n)]
        first_lo += 1
    if hi[1:] != "9" * n:
        tail = [[(first_hi, first_hi), *rest] for rest in _same_length("0" * n, hi[1:])]
        first_hi -= 1
    middle = [[(first_lo, first_hi), *[(0, 9)] * n]] if first_lo <= first_hi else []
    return head + middle + tail


def nonnegative_patterns(lo: int, hi: int, min_digits: int = 1) -> list[Pattern]:
    """Digit patterns for the numerals of lo..hi (0 <= lo), zero-padded to ``min_digits``.

    Numerals have no leading zeros beyond the padding, so every value has exactly one numeral.
    """
    if lo < 0 or lo > hi:
        raise ValueError(f"need 0 <= lo <= hi, got {lo}, {hi}")
    out: list[Pattern] = []
    start = lo
    while start <= hi:
        width = max(min_digits, len(str(start)))
        end = min(hi, 10**width - 1)
        out += _same_length(str(start).zfill(width), str(end).zfill(width))
        start = end + 1
    return out


def _render_pattern(pattern: Pattern, point_at: int | None = None, sign: str = "") -> str:
    """GBNF for one pattern; a literal "." goes before position ``point_at`` if given."""
    parts: list[str] = []
    literal = sign
    i = 0
    while i < len(pattern):
        if i == point_at:
            literal += "."
        a, b = pattern[i]
        if a == b:
            literal += str(a)
            i += 1
            continue
        if literal:
            parts.append(f'"{literal}"')
            literal = ""
        run = 1
        while (i + run < len(pattern) and pattern[i + run] == (a, b)
               and (point_at is None or not i < point_at <= i + run)):
            run += 1
        parts.append(f"[{a}-{b}]" + (f"{{{run}}}" if run > 1 else ""))
        i += run
    if literal:
        parts.append(f'"{literal}"')
    return " ".join(parts)


def _signed_alternation(lo: int, hi: int, min_digits: int, decimals: int) -> str:
    """GBNF alternation for the integers lo..hi written with ``decimals`` implied decimals."""
    if lo > hi:
        raise ValueError(f"empty range [{lo}, {hi}]")
    alts: list[str] = []
    if lo < 0:
        neg = nonnegative_patterns(max(1, -hi), -lo, min_digits)
        alts += [_render_pattern(p, _point(p, decimals), "-") for p in neg]
    if hi >= 0:
        pos = nonnegative_patterns(max(0, lo), hi, min_digits)
        alts += [_render_pattern(p, _point(p, decimals)) for p in pos]
    return "(" + " | ".join(alts) + ")"


def _point(pattern: Pattern, decimals: int) -> int | None:
    return len(pattern) - decimals if decimals else None


def integer_range_gbnf(lo: int, hi: int) -> str:
    """GBNF matching exactly the canonical decimal numerals of the integers lo..hi."""
    return _signed_alternation(int(lo), int(hi), 1, 0)


def format_scaled(k: int, decimals: int) -> str:
    """The numeral of k / 10**decimals with exactly ``decimals`` decimals (never "-0.0")."""
    if decimals == 0:
        return str(k)
    digits = str(abs(k)).zfill(decimals + 1)
    return ("-" if k < 0 else "") + digits[:-decimals] + "." + digits[-decimals:]


def scaled_bounds(lo: float, hi: float, decimals: int) -> tuple[int, int]:
    """Smallest and largest k whose numeral ``format_scaled(k)`` parses into [lo, hi]."""
    scale = 10**decimals
    k_lo = math.ceil(Decimal(str(lo)) * scale)
    k_hi = math.floor(Decimal(str(hi)) * scale)
    # Float parsing decides validity; nudge the exact-decimal bounds to agree with it.
    while float(format_scaled(k_lo, decimals)) < lo:
        k_lo += 1
    while float(format_scaled(k_lo - 1, decimals)) >= lo:
        k_lo -= 1
    while float(format_scaled(k_hi, decimals)) > hi:
        k_hi -= 1
    while float(format_scaled(k_hi + 1, decimals)) <= hi:
        k_hi += 1
    return k_lo, k_hi


def decimal_range_gbnf(lo: float, hi: float, decimals: int) -> str:
    """GBNF for numerals with exactly ``decimals`` decimals whose value lies in [lo, hi]."""
    k_lo, k_hi = scaled_bounds(lo, hi, decimals)
    return _signed_alternation(k_lo, k_hi, decimals + 1, decimals)


def string_gbnf(min_len: int, max_len: int) -> str:
    """A JSON string of min_len..max_len safe characters (no escapes)."""
    return '"\\"" ' + _repeat(STRING_CHAR, min_len, max_len) + ' "\\""'


def _repeat(atom: str, lo: int, hi: int) -> str:
    """``atom{lo,hi}`` in pieces llama.cpp accepts, with at most two live parses at a time."""
    if hi <= MAX_REPEAT:
        return f"{atom}{{{lo},{hi}}}" if hi else '""'
    rest = _repeat(atom, max(0, lo - MAX_REPEAT), hi - MAX_REPEAT)
    if lo >= MAX_REPEAT:
        return f"{atom}{{{MAX_REPEAT}}} {rest}"
    return f"({atom}{{{lo},{MAX_REPEAT - 1}}} | {atom}{{{MAX_REPEAT}}} {rest})"


# ----- the record grammar ----------------------------------------------------------------

def field_gbnf(f: Field) -> str:
    """The GBNF expression for one field's value."""
    if f.kind == "categorical":
        return "(" + " | ".join(gbnf_literal(json_text(v)) for v in f.enum) + ")"
    if f.kind == "numeric":
        assert f.minimum is not None and f.maximum is not None
        if f.is_integer:
            return integer_range_gbnf(int(f.minimum), int(f.maximum))
        k_lo, k_hi = scaled_bounds(f.minimum, f.maximum, f.precision)
        if k_lo > k_hi:
            raise UserError(f"field '{f.name}': no number with x-precision {f.precision} "
                            f"lies in [{f.minimum}, {f.maximum}]")
        return decimal_range_gbnf(f.minimum, f.maximum, f.precision)
    if f.kind == "text":
        return string_gbnf(f.min_length, f.max_length)
    raise ValueError(f"field '{f.name}' of kind {f.kind} is not part of a record")


def _rule_name(i: int, name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:24]
    return f"f{i}-{slug}" if slug else f"f{i}"


def record_gbnf(schema: Schema, class_value: Any = None, *, leading_space: bool = False) -> str:
    """GBNF for one record of ``schema``; the label is the fixed ``class_value`` if given.

    ``leading_space`` admits one optional space before the record, so a prompt can end with
    ``Record:`` and the model can use its natural `` {"`` token.
    """
    if class_value is not None and class_value not in schema.label_field.enum:
        raise ValueError(f"{class_value!r} is not a class of '{schema.label}'")
    rules: list[str] = []
    root: list[str] = []
    for i, f in enumerate(schema.record_fields):
        sep = "{" if i == 0 else ","
        root.append(gbnf_literal(sep + json_text(f.name) + ":"))
        name = _rule_name(i, f.name)
        root.append(name)
        if f.name == schema.label and class_value is not None:
            body = gbnf_literal(json_text(class_value))
        else:
            body = field_gbnf(f)
        rules.append(f"{name} ::= {body}")
    root.append('"}"')
    lead = '" "? ' if leading_space else ""
    return "\n".join(["root ::= " + lead + " ".join(root), *rules]) + "\n"


def max_value_chars(f: Field) -> int:
    """The longest text the grammar admits for one field's value."""
    if f.kind == "categorical":
        return max(len(json_text(v)) for v in f.enum)
    if f.kind == "numeric":
        assert f.minimum is not None and f.maximum is not None
        if f.is_integer:
            ends = (int(f.minimum), int(f.maximum))
            return max(len(str(x)) for x in ends)
        k_lo, k_hi = scaled_bounds(f.minimum, f.maximum, f.precision)
        return max(len(format_scaled(k, f.precision)) for k in (k_lo, k_hi))
    return f.max_length + 2


def max_record_chars(schema: Schema) -> int:
    """The longest record text the grammar admits (bounds generation length)."""
    keys = sum(len(json_text(f.name)) + 2 for f in schema.record_fields)
    return 2 + keys + sum(max_value_chars(f) for f in schema.record_fields)


# ----- forced text (jump-forward decoding) --------------------------------------------------

class RecordLayout:
    """Which text the grammar forces next, so the generator can feed it without sampling.

    In ``{"age":44,"sex":"female",...}`` every key, the separators, the quote that opens a
    string and the rest of an enum value once only one value fits are forced; so is the whole
    label when it is fixed. ``forced(prefix)`` returns that text for a valid record prefix.
    """

    def __init__(self, schema: Schema, class_value: Any = None) -> None:
        self.fields = schema.record_fields
        self.keys = [("{" if i == 0 else ",") + json_text(f.name) + ":"
                     for i, f in enumerate(self.fields)]
        self.alts: list[list[str] | None] = []
        for f in self.fields:
            if f.name == schema.label and class_value is not None:
                self.alts.append([json_text(class_value)])
            elif f.kind == "categorical":
                self.alts.append([json_text(v) for v in f.enum])
            else:
                self.alts.append(None)

    def _after(self, i: int) -> str:
        """Forced text once field ``i``'s value is complete."""
        if i + 1 == len(self.fields):
            return "}"
        return self.keys[i + 1] + self._value(i + 1, "")

    def _value(self, i: int, partial: str) -> str:
        """Forced text while field ``i``'s value so far is ``partial``."""
        f, alts = self.fields[i], self.alts[i]
        if alts is not None:
            fits = [a for a in alts if a.startswith(partial)]
            if len(fits) == 1:
                return fits[0][len(partial):] + self._after(i)
            return _common_prefix(fits)[len(partial):] if fits else ""
        if f.kind == "text":
            if not partial:
                return '"'
            return '"' + self._after(i) if len(partial) - 1 == f.max_length else ""
        return "-" if not partial and f.maximum is not None and f.maximum < 0 else ""

    def forced(self, text: str) -> str:
        """The text every valid completion of ``text`` continues with ("" if none is forced)."""
        pos = 1 if text.startswith(" ") else 0
        if pos == len(text):
            return self.keys[0] + self._value(0, "") if pos else ""
        for i in range(len(self.fields)):
            rest = text[pos:]
            if len(rest) <= len(self.keys[i]):
                return self.keys[i][len(rest):] + self._value(i, "")
            pos += len(self.keys[i])
            rest = text[pos:]
            end = self._value_end(i, rest)
            if end is None:
                return self._value(i, rest)
            pos += end
        return "" if pos < len(text) else "}"

    def _value_end(self, i: int, rest: str) -> int | None:
        """Length of field ``i``'s complete value at the start of ``rest``, None if unfinished."""
        alts = self.alts[i]
        if alts is not None:
            for a in alts:
                if rest.startswith(a) and rest[len(a):len(a) + 1] in (",", "}"):
                    return len(a)
            return None
        if self.fields[i].kind == "text":
            close = rest.find('"', 1)
            return close + 1 if close > 0 else None
        m = _NUMBER_PREFIX.match(rest)
        return m.end() if m and m.end() < len(rest) else None


_NUMBER_PREFIX = re.compile(r"-?[0-9.]*")


def _common_prefix(texts: list[str]) -> str:
    first, last = min(texts), max(texts)
    n = 0
    while n < min(len(first), len(last)) and first[n] == last[n]:
        n += 1
    return first[:n]


# ----- rendering and parsing ----------------------------------------------------------------

def format_field(f: Field, value: Any) -> str:
    """A value's JSON text in the grammar's layout (numbers with exactly their precision)."""
    if f.kind == "numeric" and not f.is_integer:
        text = f"{float(value):.{f.precision}f}"
        return text[1:] if text.startswith("-") and not text.strip("-0.") else text
    return json_text(value)


def render_record(record: dict[str, Any], schema: Schema) -> str:
    """A record as the compact JSON text the grammar produces (few-shot examples use it)."""
    body = ",".join(f"{json_text(f.name)}:{format_field(f, record[f.name])}"
                    for f in schema.record_fields)
    return "{" + body + "}"


def has_excluded_chars(text: str) -> bool:
    """True if a string value cannot be written by the grammar (quote, backslash, control)."""
    return bool(_EXCLUDED.search(text))


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_record(text: str, schema: Schema,
                 validator: Draft202012Validator | None = None) -> dict[str, Any] | None:
    """The record in ``text`` if it is one JSON object valid under the record schema, else None.

    Strict JSON only: duplicate keys, NaN and Infinity are rejected. Pass ``validator``
    (``schema.record_validator()``) when parsing many records, to build it once.
    """
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    if not (validator or schema.record_validator()).is_valid(value):
        return None
    return value
