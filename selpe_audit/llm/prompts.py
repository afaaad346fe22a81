"""Every prompt text the generator sends to the model, in one place.

Prompts are plain completions, not chat turns: the default model (Gemma 3 270M) is a base
model with no chat template, and it continues a few-shot list far more reliably than it
follows instructions. The artifact and decode provenance record `templates_digest()`, so any
wording change is visible.

- Stage I (latent context): from positive examples (this class), contrastive negatives
  ("unlike these") and optional public hints, write a short description of one new record:
  its categorical and free-text fields in the schema's wording
  (``sex: female; arrival mode: walk-in; chief complaint: "sore throat"; ...``).
- Stage II (realization): a few-shot list of description -> record pairs; the new
  description is realized as one JSON record under the schema's grammar, numbers included.
- Single stage (ablation): the few-shot list of JSON records; the model writes the next one.

Only public inputs go into a prompt: the schema, DP-selected or synthetic records, and hints
derived from released (noisy) numbers.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from selpe_audit.llm.grammar import json_text, render_record
from selpe_audit.schema import Field, Schema, format_value

TEMPLATES: dict[str, str] = {
    "header": "Fictional {dataset} records (synthetic examples, not real people).\n",
    "fields": "Fields: {fields}.\n",
    "field_numeric": "{description} ({low} to {high})",
    "field_categorical": "{description} ({values})",
    "field_text": "{description} (free text)",
    "class": "Every record below has {label}: {value}.\n",
    "hints": "Typical values: {hints}.\n",
    "hint_item": "{name}: {text}",
    "negatives": "Unlike these other records:\n{items}",
    "negative_item": "- {text}\n",
    "positives": "Records like these:\n{items}",
    "positive_item": "- {text}\n",
    "description_item": "{description}: {value}",
    "field_item": "{name}: {value}",
    "stage1_open": "-",
    "stage2_intro": "Each description is written as one JSON record.\n",
    "stage2_pair": "Description: {description}\nRecord: {record}\n",
    "stage2_open": "Description: {description}\nRecord:",
    "single_item": "Record: {record}\n",
    "single_open": "Record:",
    "text_intro": "Each record's {field} is written after its other fields.\n",
    "text_example": "Record: {fields}\n{field}: \"{text}\"\n",
    "text_topic": "Some {field} texts of records like the next one: {items}.\n",
    "text_open": "Record: {fields}\n{field}: \"",
}

# Separators inside lists of fields or hints; part of the wording, so part of the digest.
_SEPARATORS = {"list": "; ", "values": ", "}
# What the code puts into the templates, stated so that a change shows in the digest too.
_RULES = {
    "context_fields": "categorical and free-text fields, not numbers, not the label",
    "record_layout": "compact JSON, schema field order, numbers with x-precision decimals",
    "style": "plain completion (no chat template), BOS first",
    "text_fields": "hybrid decoder and the release's LLM candidates (llm.text): every field "
                   "but free text, in the schema's wording; the free text is written in "
                   "quotes and ends at the closing quote; the topic line shows the topic's "
                   "public texts, or a few of the schema's example texts without a topic; a "
                   "shown text is not copied past its first tokens (engine.AVOID_SHARED); a "
                   "DP keyword topic's text opens with the record's released keywords, no "
                   "topic line, and must go on past them; a DP vocabulary's \"other\" text "
                   "is no released term, and a keyword field's is shown none",
}


def templates_digest() -> str:
    """SHA-256 of every template (canonical JSON), for the artifact and provenance."""
    blob = json.dumps({"templates": TEMPLATES, "separators": _SEPARATORS, "rules": _RULES},
                      sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


# ----- shared pieces ---------------------------------------------------------------------

def _fmt_bound(x: float | None) -> str:
    if x is None:
        return "?"
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _field_guide(f: Field) -> str:
    if f.kind == "categorical":
        values = _SEPARATORS["values"].join(str(v) for v in f.enum)
        return TEMPLATES["field_categorical"].format(description=f.description, values=values)
    if f.kind == "numeric":
        return TEMPLATES["field_numeric"].format(description=f.description,
                                                 low=_fmt_bound(f.minimum),
                                                 high=_fmt_bound(f.maximum))
    return TEMPLATES["field_text"].format(description=f.description)


def header(schema: Schema, class_value: Any = None,
           hints: Mapping[str, str] | None = None) -> str:
    """Dataset line, field guide, the class (if fixed) and public hints."""
    fields = _SEPARATORS["list"].join(_field_guide(f) for f in schema.record_fields)
    out = TEMPLATES["header"].format(dataset=schema.name) + TEMPLATES["fields"].format(
        fields=fields)
    if class_value is not None:
        out += TEMPLATES["class"].format(label=schema.label_field.description, value=class_value)
    if hints:
        names = {f.name: f.description for f in schema.record_fields}
        items = [TEMPLATES["hint_item"].format(name=names.get(k, k), text=v)
                 for k, v in hints.items()]
        out += TEMPLATES["hints"].format(hints=_SEPARATORS["list"].join(items))
    return out


def context_fields(schema: Schema) -> list[Field]:
    """Fields a latent context mentions: categorical and free text, not numbers or the label.

    Numbers are left to Stage II, which realizes them consistently with the context (and
    keeps Stage I short); a schema without such fields describes everything but the label.
    """
    fields = [f for f in schema.record_fields
              if f.kind in ("categorical", "text") and f.name != schema.label]
    return fields or [f for f in schema.record_fields if f.name != schema.label]


def describe(record: Mapping[str, Any], schema: Schema) -> str:
    """A record's latent context as one line of text, free text in quotes.

    The quotes show a small model where a free-text value ends when Stage II copies it.
    """
    parts = []
    for f in context_fields(schema):
        value = record[f.name]
        text = json_text(" ".join(str(value).split())) if f.kind == "text" else format_value(
            f, value)
        parts.append(TEMPLATES["description_item"].format(description=f.description,
                                                          value=text))
    return _SEPARATORS["list"].join(parts)


def _block(key: str, item_key: str, texts: Sequence[str]) -> str:
    if not texts:
        return ""
    items = "".join(TEMPLATES[item_key].format(text=t) for t in texts)
    return TEMPLATES[key].format(items=items)


# ----- the three prompts -----------------------------------------------------------------

def stage1_prompt(schema: Schema, *, class_value: Any, positives: Sequence[Mapping[str, Any]],
                  negatives: Sequence[Mapping[str, Any]],
                  hints: Mapping[str, str] | None = None) -> str:
    """Stage I: ends where the model writes one new description (stop at end of line)."""
    pos = "".join(TEMPLATES["positive_item"].format(text=describe(r, schema)) for r in positives)
    return (header(schema, class_value, hints)
            + _block("negatives", "negative_item", [describe(r, schema) for r in negatives])
            + TEMPLATES["positives"].format(items=pos) + TEMPLATES["stage1_open"])


def stage2_prefix(schema: Schema, *, positives: Sequence[Mapping[str, Any]]) -> str:
    """Stage II's shared part: description -> record pairs (ends with a newline)."""
    pairs = "".join(TEMPLATES["stage2_pair"].format(description=describe(r, schema),
                                                    record=render_record(dict(r), schema))
                    for r in positives)
    return header(schema) + TEMPLATES["stage2_intro"] + pairs


def stage2_suffix(context: str) -> str:
    """Stage II's per-record part: the latent context, then the record is generated."""
    return TEMPLATES["stage2_open"].format(description=" ".join(context.split()))


def single_stage_prompt(schema: Schema, *, class_value: Any,
                        positives: Sequence[Mapping[str, Any]],
                        negatives: Sequence[Mapping[str, Any]],
                        hints: Mapping[str, str] | None = None) -> str:
    """Single stage (ablation): JSON examples, then the model writes the next record."""
    def items(rs: Sequence[Mapping[str, Any]]) -> list[str]:
        return [render_record(dict(r), schema) for r in rs]

    neg = _block("negatives", "negative_item", items(negatives))
    pos = "".join(TEMPLATES["single_item"].format(record=t) for t in items(positives))
    return (header(schema, class_value, hints) + neg + TEMPLATES["positives"].format(items=pos)
            + TEMPLATES["single_open"])


# ----- free text for records whose other fields are given (llm.text) ----------------------

def record_fields_line(record: Mapping[str, Any], schema: Schema) -> str:
    """Every field of a record but free text and the label (the prompt's header states the
    class), by field name: half the tokens of the schema's descriptions, and a text prompt's
    own part is read once per text (it was 9 in 10 of the tokens the LLM handled)."""
    return _SEPARATORS["list"].join(
        TEMPLATES["field_item"].format(name=f.name, value=format_value(f, record[f.name]))
        for f in schema.record_fields
        if f.kind not in ("text", "id") and f.name != schema.label)


def text_prefix(schema: Schema, field: Field, *, class_value: Any,
                examples: Sequence[Mapping[str, Any]]) -> str:
    """The shared part of one class's text prompts: the class, then DP-selected records
    with their text for ``field`` (public exemplars) as a few-shot list."""
    head = (TEMPLATES["header"].format(dataset=schema.name)
            + TEMPLATES["class"].format(label=schema.label_field.description, value=class_value)
            + TEMPLATES["text_intro"].format(field=field.description))
    return head + "".join(
        TEMPLATES["text_example"].format(fields=record_fields_line(r, schema),
                                         field=field.description,
                                         text=" ".join(str(r[field.name]).split()))
        for r in examples)


def text_topic(field: Field, topic_texts: Sequence[str]) -> str:
    """A record's topic line: its topic's public texts (empty without any)."""
    if not topic_texts:
        return ""
    return TEMPLATES["text_topic"].format(
        field=field.description,
        items=_SEPARATORS["list"].join(json_text(" ".join(t.split())) for t in topic_texts))


def text_suffix(schema: Schema, field: Field, record: Mapping[str, Any],
                topic_texts: Sequence[str], opening: str = "") -> str:
    """One record's part: its topic line (if any), its fields, then the opening quote of
    the text the model writes and the words the text starts with (``opening``, if any)."""
    return text_topic(field, topic_texts) + TEMPLATES["text_open"].format(
        fields=record_fields_line(record, schema), field=field.description) + opening
