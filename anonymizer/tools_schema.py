"""Rewrite JSON documents (tool definitions, tool-call arguments, JSON schemas): same structure, new words.

Schema keywords and types stay; names (tools, properties, $defs) become keyed identifiers, every other
string becomes Faker text of the same token count, and the whole document is then fitted to its exact
original token count by lengthening or shortening its longest text. Pure apart from the tokenizer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from anonymizer.fakes import Fakes
from llmreplay.exact_text import ExactText

# Keys whose values are schemas, lists of schemas, or maps from a user-chosen name to a schema.
SCHEMA_ONE = frozenset(
    "items additionalProperties not if then else contains propertyNames unevaluatedProperties "
    "unevaluatedItems additionalItems".split()
)
SCHEMA_LIST = frozenset("anyOf oneOf allOf prefixItems".split())
SCHEMA_MAP = frozenset("properties patternProperties $defs definitions dependentSchemas".split())
# Kept verbatim: types, formats and numeric or boolean constraints carry no user content.
SCHEMA_KEEP = frozenset(
    "type format $schema minimum maximum exclusiveMinimum exclusiveMaximum minLength maxLength minItems "
    "maxItems uniqueItems multipleOf minProperties maxProperties strict nullable deprecated readOnly "
    "writeOnly contentEncoding contentMediaType".split()
)
SCHEMA_TEXT = frozenset("description title $comment pattern".split())
SCHEMA_VALUES = frozenset("enum const default examples".split())
SCHEMA_KEYWORDS = (
    SCHEMA_ONE | SCHEMA_LIST | SCHEMA_MAP | SCHEMA_KEEP | SCHEMA_TEXT | SCHEMA_VALUES | {"required", "$ref"}
)
_FIT_ATTEMPTS = 8


class Slot:
    """A string leaf to be filled with `tokens` words: the given `words` first, then words drawn from
    `seed`; the fitter may resize it.
    """

    __slots__ = ("seed", "tokens", "words")

    def __init__(self, seed: bytes, tokens: int, words: Sequence[str] = ()):
        self.seed, self.tokens, self.words = seed, tokens, words

    def text(self, exact: ExactText) -> str:
        given = self.words
        if self.tokens <= len(given):
            return "".join(given[: self.tokens])
        return "".join(given) + exact.text(self.tokens - len(given), self.seed)


class Rendered:
    """A JSON value that is sent as text inside another document (tool-call arguments)."""

    __slots__ = ("value", "render")

    def __init__(self, value: Any, render: Callable[[Any], str]):
        self.value, self.render = value, render


class JsonTemplate:
    """A JSON value whose text leaves are Slots, built by walking the original once."""

    def __init__(self, fakes: Fakes):
        self.fakes = fakes
        self.slots: list[Slot] = []

    def text(self, value: str) -> Slot:
        slot = Slot(self.fakes.rekeyer.seed("leaf", value.encode()), self.fakes.count(value))
        self.slots.append(slot)
        return slot

    def value(self, value: Any) -> Any:
        """Any JSON value: keys become identifiers, strings text, numbers keyed numbers."""
        if isinstance(value, dict):
            return {self.fakes.identifier(k): self.value(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return self.fakes.number(value)
        return value

    def schema(self, schema: Any) -> Any:
        """A JSON schema: keywords and structure kept, names renamed, texts and values faked."""
        if isinstance(schema, list):  # `items` as a list (older drafts)
            return [self.schema(s) for s in schema]
        if not isinstance(schema, dict):
            return schema  # true / false schemas
        out: dict[str, Any] = {}
        for key, value in schema.items():
            if key in SCHEMA_KEEP:
                out[key] = value
            elif key in SCHEMA_ONE:
                out[key] = self.schema(value)
            elif key in SCHEMA_LIST and isinstance(value, list):
                out[key] = [self.schema(v) for v in value]
            elif key in SCHEMA_MAP and isinstance(value, dict):
                out[key] = {self.fakes.identifier(k): self.schema(v) for k, v in value.items()}
            elif key == "required" and isinstance(value, list):
                out[key] = [self.fakes.identifier(v) if isinstance(v, str) else v for v in value]
            elif key == "$ref" and isinstance(value, str):
                out[key] = self._ref(value)
            elif key in SCHEMA_TEXT and isinstance(value, str):
                out[key] = self.text(value)
            else:  # enum/const/default/examples, and unknown keys (which may hold user words)
                out[key if key in SCHEMA_VALUES else self.fakes.identifier(key)] = self.value(value)
        return out

    def _ref(self, ref: str) -> str:
        parts = ref.split("/")
        if ref.startswith("#/") and len(parts) >= 3 and parts[1] in ("$defs", "definitions"):
            return "/".join([*parts[:2], *(self.fakes.identifier(p) for p in parts[2:])])
        return "#" if ref.startswith("#") else self.fakes.identifier(ref)

    def tool(self, tool: Any) -> Any:
        """One tool definition (Chat Completions nested, Responses flat, or Anthropic's input_schema form)."""
        if not isinstance(tool, dict):
            return self.value(tool)
        out: dict[str, Any] = {}
        for key, value in tool.items():
            if key in ("type", "strict"):
                out[key] = value
            elif key == "function" and isinstance(value, dict):
                out[key] = self.tool(value)
            elif key == "name" and isinstance(value, str):
                out[key] = self.fakes.identifier(value)
            elif key == "description" and isinstance(value, str):
                out[key] = self.text(value)
            elif key in ("parameters", "schema", "input_schema"):  # input_schema: Anthropic's
                out[key] = self.schema(value)
            elif key == "cache_control" and isinstance(value, dict) and set(value) <= {"type", "ttl"}:
                out[key] = value  # a prompt-cache marker: protocol, no content
            else:
                out[key] = self.value(value)
        return out

    def slot(self, seed: bytes, tokens: int, words: Sequence[str] = ()) -> Slot:
        """A text leaf seeded by the caller (for text whose seed follows the conversation)."""
        slot = Slot(seed, tokens, words)
        self.slots.append(slot)
        return slot

    def fill(self, template: Any) -> Any:
        """The plain JSON value, with every Slot replaced by its words and Rendered nodes by text."""
        if isinstance(template, Slot):
            return template.text(self.fakes.exact)
        if isinstance(template, Rendered):
            return template.render(self.fill(template.value))
        if isinstance(template, dict):
            return {k: self.fill(v) for k, v in template.items()}
        if isinstance(template, list):
            return [self.fill(v) for v in template]
        return template


def fit_value(
    template: JsonTemplate, value: Any, render: Callable[[Any], str], target_tokens: int
) -> tuple[Any, str, int]:
    """Fill `value` and resize its longest slot until `render(filled)` has exactly `target_tokens` tokens.

    Inner words never merge, so resizing a slot by d words moves the count by d; only boundaries
    (quotes, joins) can differ from the original, which is what this corrects.
    Returns (filled value, its rendered text, that text's token count).
    """
    count = template.fakes.count
    filled = template.fill(value)
    text = render(filled)
    actual = count(text)
    for _ in range(_FIT_ATTEMPTS):
        delta = target_tokens - actual
        if delta == 0 or not template.slots:
            break
        slot = max(template.slots, key=lambda s: s.tokens)
        if delta < 0 and slot.tokens == 0:
            break
        slot.tokens = max(0, slot.tokens + delta)
        filled = template.fill(value)
        text = render(filled)
        actual = count(text)
    return filled, text, actual


def fit(
    template: JsonTemplate, value: Any, render: Callable[[Any], str], target_tokens: int
) -> tuple[str, bool]:
    """`fit_value` for documents: returns (text, exact)."""
    _, text, actual = fit_value(template, value, render, target_tokens)
    return text, actual == target_tokens


def json_renderer(original: str) -> Callable[[Any], str]:
    """Serialize the way `original` was serialized (compact, or Python's default spacing)."""
    try:
        parsed = json.loads(original)
    except ValueError:
        return _compact
    if json.dumps(parsed, separators=(",", ":"), ensure_ascii=False) == original:
        return _compact
    if json.dumps(parsed, ensure_ascii=False) == original:
        return lambda v: json.dumps(v, ensure_ascii=False)
    if json.dumps(parsed) == original:
        return json.dumps
    return _compact


def _compact(value: Any) -> str:
    return orjson.dumps(value).decode()


def json_text_template(template: JsonTemplate, original: str) -> Any:
    """A template for JSON given as text (tool-call arguments); text that is not JSON (such as
    truncated streamed arguments) becomes one text slot.
    """
    try:
        parsed = orjson.loads(original)
    except orjson.JSONDecodeError:
        return template.text(original)
    return Rendered(template.value(parsed), json_renderer(original))


def rewrite_json_text(fakes: Fakes, original: str, kind: str = "value") -> tuple[str, bool]:
    """Rewrite a JSON document given as text (kind: value, schema, tools) to its exact token count.

    Text that is not JSON (for example truncated streamed arguments) becomes plain words.
    """
    try:
        parsed = orjson.loads(original)
    except orjson.JSONDecodeError:
        return fakes.text_for(original), True
    template = JsonTemplate(fakes)
    if kind == "tools" and isinstance(parsed, list):
        value = [template.tool(t) for t in parsed]
    elif kind == "schema":
        value = template.schema(parsed)
    else:
        value = template.value(parsed)
    return fit(template, value, json_renderer(original), fakes.count(original))


def rewrite_response_format(fakes: Fakes, original: str) -> tuple[str, bool]:
    """response_format: its JSON schema fitted to the schema's own token count (schema_tokens),
    then the whole document to its count using the texts outside the schema.
    """
    try:
        parsed = orjson.loads(original)
    except orjson.JSONDecodeError:
        return fakes.text_for(original), True
    holder = parsed.get("json_schema", parsed) if isinstance(parsed, dict) else None
    if not isinstance(holder, dict) or "schema" not in holder:
        return rewrite_json_text(fakes, original, "tools" if isinstance(parsed, list) else "value")
    schema_template = JsonTemplate(fakes)
    schema_value = schema_template.schema(holder["schema"])
    schema_text, schema_exact = fit(
        schema_template, schema_value, _compact, fakes.count(_compact(holder["schema"]))
    )
    outer = JsonTemplate(fakes)
    fitted_schema = orjson.loads(schema_text)
    new_holder = {}
    for key, value in holder.items():
        if key == "schema":
            new_holder[key] = fitted_schema
        elif key in ("type", "strict"):
            new_holder[key] = value
        elif key == "name" and isinstance(value, str):
            new_holder[key] = fakes.identifier(value)
        else:
            new_holder[key] = outer.value(value)
    if holder is parsed:
        document = new_holder
    else:
        document = {
            k: new_holder if k == "json_schema" else v if k == "type" else outer.value(v)
            for k, v in parsed.items()
        }
    text, exact = fit(outer, document, json_renderer(original), fakes.count(original))
    return text, exact and schema_exact
