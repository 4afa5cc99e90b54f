"""runtime.storable: NUL characters, which PostgreSQL keeps in neither text nor JSON."""
from __future__ import annotations

import json

import pytest

from runtime.capability import CapabilitySpec, Kind
from runtime.storable import json_has_nul, json_without_nul, text_without_nul
from runtime.validation import argument_errors


@pytest.mark.parametrize("value,has", [
    ("a\x00b", True),
    ({"key\x00": 1}, True),
    (["x", ["\x00"]], True),
    ("\\u0000", False),          # the literal text backslash-u0000: an escaped backslash, then "u0000"
    ("\\\x00", True),            # a backslash, then a NUL
    ("plain", False),
])
def test_a_nul_is_found_in_json_text_and_only_a_real_one(value, has):
    text = json.dumps(value, ensure_ascii=False)
    assert json_has_nul(text) is has
    assert json.loads(json_without_nul(text)) == replaced(value)


def replaced(value):
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, list):
        return [replaced(v) for v in value]
    if isinstance(value, dict):
        return {replaced(k): replaced(v) for k, v in value.items()}
    return value


def test_text_keeps_its_nul_characters_as_the_replacement_character():
    assert text_without_nul("bad\x00message\x00") == "bad\ufffdmessage\ufffd"
    assert text_without_nul("fine") == "fine"


def test_arguments_with_a_nul_character_are_refused_and_a_literal_escape_is_not():
    spec = CapabilitySpec(name="echo", kind=Kind.PYTHON,
                          schema={"type": "object", "properties": {"text": {"type": "string"}}})
    errors = argument_errors(spec, {"text": "a\x00b"})
    assert [e.code for e in errors] == ["invalid_arguments"] and "NUL character" in errors[0].message
    assert argument_errors(spec, {"text": "\\u0000"}) == []
