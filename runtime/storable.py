"""Text both databases hold alike: none with a NUL character or a lone surrogate.

PostgreSQL keeps no NUL (U+0000) in text or JSON (SQLite does), and neither database's
driver can encode a lone surrogate (U+D800-U+DFFF, which JSON's \\ud800 escapes can make
and UTF-8 cannot carry). A value holding one would fail the write, on one stack or both:
a run's pass could never be written, a request would end in a server error.
What people and agents send is refused with a clear message (arguments, API bodies);
what the outside world answered (a tool's output or error, a model's plan, an MCP
server's descriptions) is kept, each such character as U+FFFD.
"""
from __future__ import annotations

import json
import re
from typing import Any

REPLACEMENT = "\ufffd"
UNSTORABLE = ("text with a NUL character (\\u0000) or a lone surrogate (\\ud800-\\udfff) is refused: "
              "the database keeps neither")
# A \u0000 escape in JSON text: preceded by an even run of backslashes (escaped backslashes),
# so the literal text "\\u0000" (an escaped backslash, then "u0000") is not one.
_ESCAPED_NUL = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")
# In a Python str a surrogate is always a lone one: JSON decoding joins a valid pair into one character.
_UNSTORABLE_CHAR = re.compile("[\x00\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def text_storable(text: str) -> str:
    """The text with each NUL character and lone surrogate as U+FFFD."""
    return _UNSTORABLE_CHAR.sub(REPLACEMENT, text)


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


def value_unstorable(value: Any, text: str) -> bool:
    """Whether a value parsed from JSON `text` holds a NUL character or a lone surrogate (the text's
    escapes say whether one may be there; then the value is written out to be sure)."""
    if "\\u0000" not in text and _SURROGATE_ESCAPE.search(text) is None:
        return False
    return json_unstorable(json.dumps(value, ensure_ascii=False))


def storable_value(value: Any, text: str) -> Any:
    """A value parsed from JSON `text`, each NUL character and lone surrogate in it as U+FFFD."""
    if not value_unstorable(value, text):
        return value
    return json.loads(json_storable(json.dumps(value, ensure_ascii=False)))
