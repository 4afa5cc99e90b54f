"""Text both databases hold alike: none with a NUL character (U+0000).

PostgreSQL keeps no NUL in text or JSON (SQLite does), so a value carrying one would be
stored on one stack and fail the write on the other: a run's pass could never be written.
What people and agents send is refused with a clear message (arguments, API bodies);
what the outside world answered (a tool's output or error) is kept, each NUL as U+FFFD.
"""
from __future__ import annotations

import re

NUL = "\x00"
REPLACEMENT = "\ufffd"
NUL_REFUSED = "text with a NUL character (\\u0000) is refused: the database keeps none"
# A \u0000 escape in JSON text: preceded by an even run of backslashes (escaped backslashes),
# so the literal text "\\u0000" (an escaped backslash, then "u0000") is not one.
_ESCAPED_NUL = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")


def json_has_nul(text: str) -> bool:
    """Whether JSON text holds a NUL character in a string or a key (escaped, as JSON must)."""
    return "\\u0000" in text and _ESCAPED_NUL.search(text) is not None


def json_without_nul(text: str) -> str:
    """The JSON text with each NUL character as U+FFFD."""
    return _ESCAPED_NUL.sub(r"\1\\ufffd", text) if "\\u0000" in text else text


def text_without_nul(text: str) -> str:
    return text.replace(NUL, REPLACEMENT) if NUL in text else text
