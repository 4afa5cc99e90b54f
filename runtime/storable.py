"""Text both databases hold alike: none with a NUL character or a lone surrogate, and JSON
with no number JSON cannot write.

PostgreSQL keeps no NUL (U+0000) in text or JSON (SQLite does), and neither database's
driver can encode a lone surrogate (U+D800-U+DFFF, which JSON's \\ud800 escapes can make
and UTF-8 cannot carry). PostgreSQL's JSON has no NaN or Infinity, which Python's json
writes and reads (and 1e400 reads as Infinity). A value holding one would fail the write,
on one stack or both: a run's pass could never be written, a request would end in a
server error. What people and agents send is refused with a clear message (arguments, API
bodies); what the outside world answered (a tool's output or error, a model's plan, an MCP
server's descriptions) is kept, each such character as U+FFFD and each such number as its
name ("NaN", "Infinity", "-Infinity").
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

REPLACEMENT = "\ufffd"
UNSTORABLE = ("text with a NUL character (\\u0000) or a lone surrogate (\\ud800-\\udfff) is refused: "
              "the database keeps neither")
NON_FINITE = "a number JSON cannot write (NaN, Infinity, -Infinity) is refused"
# A \u0000 escape in JSON text: preceded by an even run of backslashes (escaped backslashes),
# so the literal text "\\u0000" (an escaped backslash, then "u0000") is not one.
_ESCAPED_NUL = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")
# In a Python str a surrogate is always a lone one: JSON decoding joins a valid pair into one character.
_UNSTORABLE_CHAR = re.compile("[\x00\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
# JSON source text that may read as a non-finite float: its names, or an exponent of 3+ digits.
_MAYBE_NON_FINITE = re.compile(r"NaN|Infinity|[0-9.][eE][+-]?[0-9]{3}")


def text_storable(text: str) -> str:
    """The text with each NUL character and lone surrogate as U+FFFD."""
    return _UNSTORABLE_CHAR.sub(REPLACEMENT, text)


def text_unstorable(text: str) -> bool:
    """Whether the text holds a NUL character or a lone surrogate (a person's text is refused then)."""
    return _UNSTORABLE_CHAR.search(text) is not None


def json_storable(text: str) -> str:
    """JSON text (as json.dumps writes it with ensure_ascii=False: NUL escaped, surrogates raw) with
    each NUL character and lone surrogate as U+FFFD."""
    if "\\u0000" in text:
        text = _ESCAPED_NUL.sub(r"\1\\ufffd", text)
    return text_storable(text)


def json_unstorable(text: str) -> bool:
    """Whether JSON text written by json.dumps(ensure_ascii=False) holds a NUL character or a lone
    surrogate, in a string or a key."""
    return ("\\u0000" in text and _ESCAPED_NUL.search(text) is not None) or _UNSTORABLE_CHAR.search(text) is not None


def non_finite(value: Any) -> bool:
    """Whether a parsed JSON value holds a NaN or an infinite number (walked without recursion)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False


def _named(value: Any) -> Any:
    """The value with each NaN and infinite number as its name."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {key: _named(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_named(item) for item in value]
    return value


def storable_dumps(value: Any, **dumps: Any) -> str:
    """json.dumps(value, **dumps) as the records can hold it: each NaN and infinite number as its name,
    each NUL character and lone surrogate as U+FFFD (dumps must not set ensure_ascii=True)."""
    text = json.dumps(value, ensure_ascii=False, **dumps)
    if ("NaN" in text or "Infinity" in text) and non_finite(value):
        text = json.dumps(_named(value), ensure_ascii=False, **dumps)
    return json_storable(text)


def value_unstorable(value: Any, text: str) -> bool:
    """Whether a value parsed from JSON `text` holds a NUL character, a lone surrogate or a non-finite
    number (the text says whether one may be there; then the value is looked at to be sure)."""
    if _MAYBE_NON_FINITE.search(text) is not None and non_finite(value):
        return True
    if "\\u0000" not in text and _SURROGATE_ESCAPE.search(text) is None:
        return False
    return json_unstorable(json.dumps(value, ensure_ascii=False))


def storable_value(value: Any, text: str) -> Any:
    """A value parsed from JSON `text`, each NUL character and lone surrogate in it as U+FFFD and each
    non-finite number as its name."""
    if not value_unstorable(value, text):
        return value
    return json.loads(storable_dumps(value))
