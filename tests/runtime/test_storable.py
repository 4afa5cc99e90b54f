"""runtime.storable: NUL characters (PostgreSQL keeps none in text or JSON) and lone surrogates
(no database driver can encode them), which JSON's escapes can carry; and the numbers JSON cannot
write (NaN, Infinity), which Python's json reads and writes and PostgreSQL's JSON refuses."""
from __future__ import annotations

import json

import pytest

from runtime.capability import CapabilitySpec, Kind
from runtime.storable import (
    json_storable,
    json_unstorable,
    non_finite,
    storable_dumps,
    storable_value,
    text_storable,
    value_unstorable,
)
from runtime.validation import argument_errors


@pytest.mark.parametrize("value,unstorable", [
    ("a\x00b", True),
    ({"key\x00": 1}, True),
    (["x", ["\x00"]], True),
    ("\\u0000", False),          # the literal text backslash-u0000: an escaped backslash, then "u0000"
    ("\\\x00", True),            # a backslash, then a NUL
    ("a\ud800b", True),          # a lone high surrogate
    ({"\udfff": "x"}, True),     # a lone low surrogate, in a key
    ("\U0001f600 ok", False),    # a character beyond the BMP: a valid pair in JSON, one character here
    ("plain", False),
])
def test_nul_characters_and_lone_surrogates_are_found_and_kept_as_the_replacement_character(value, unstorable):
    text = json.dumps(value, ensure_ascii=False)
    assert json_unstorable(text) is unstorable
    assert json.loads(json_storable(text)) == replaced(value)
    escaped = json.dumps(value)   # as a client sends it: \u escapes
    parsed = json.loads(escaped)
    assert value_unstorable(parsed, escaped) is unstorable
    assert storable_value(parsed, escaped) == replaced(value)


def replaced(value):
    if isinstance(value, str):
        return text_storable(value)
    if isinstance(value, list):
        return [replaced(v) for v in value]
    if isinstance(value, dict):
        return {replaced(k): replaced(v) for k, v in value.items()}
    return value


def test_text_keeps_nul_characters_and_lone_surrogates_as_the_replacement_character():
    assert text_storable("bad\x00message\ud800") == "bad\ufffdmessage\ufffd"
    assert text_storable("fine \U0001f600") == "fine \U0001f600"


@pytest.mark.parametrize("text", ["a\x00b", "a\udc00b"])
def test_arguments_holding_one_are_refused_and_a_literal_escape_is_not(text):
    spec = CapabilitySpec(name="echo", kind=Kind.PYTHON,
                          schema={"type": "object", "properties": {"text": {"type": "string"}}})
    errors = argument_errors(spec, {"text": text})
    assert [e.code for e in errors] == ["invalid_arguments"] and "NUL character" in errors[0].message
    assert argument_errors(spec, {"text": "\\u0000 \\ud800"}) == []


NON_FINITE_TEXT = '{"n": NaN, "deep": [[{"i": Infinity}]], "m": -Infinity, "big": 1e400, "name": "NaN", "ok": 1.5e10}'
NAMED = {"n": "NaN", "deep": [[{"i": "Infinity"}]], "m": "-Infinity", "big": "Infinity", "name": "NaN", "ok": 1.5e10}


def test_non_finite_numbers_read_from_json_are_kept_as_their_names():
    parsed = json.loads(NON_FINITE_TEXT)
    assert non_finite(parsed) and value_unstorable(parsed, NON_FINITE_TEXT)
    assert storable_value(parsed, NON_FINITE_TEXT) == NAMED
    assert not value_unstorable({"name": "NaN", "e": 1e300}, '{"name": "NaN", "e": 1e300}')


def test_non_finite_numbers_written_out_are_written_as_their_names():
    value = {"n": float("nan"), "i": (float("inf"),), "text": "a\x00b"}
    assert json.loads(storable_dumps(value)) == {"n": "NaN", "i": ["Infinity"], "text": "a\ufffdb"}
    assert storable_dumps({"name": "Infinity"}) == '{"name": "Infinity"}'


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("schema", [{"type": "number"}, {}], ids=["number", "any"])
def test_arguments_holding_a_non_finite_number_are_refused(number, schema):
    spec = CapabilitySpec(name="scale", kind=Kind.PYTHON, schema={"type": "object", "properties": {"x": schema}})
    errors = argument_errors(spec, {"x": [number]} if not schema else {"x": number})
    assert "invalid_arguments" in [e.code for e in errors]
    assert any("NaN, Infinity" in e.message for e in errors)
    assert argument_errors(spec, {"x": 1e308} if schema else {"x": "NaN"}) == []
