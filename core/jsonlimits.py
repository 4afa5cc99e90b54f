"""JSON that cannot be used against the server: bounded size and nesting depth.

Every JSON body the API parses and every JSON text a form field holds goes through
`loads()`, so a document nested 10,000 levels deep (RecursionError in the parser,
in jsonschema or in the database adapter) or a huge text is refused with one clear
message instead of a 500. Non-finite numbers (NaN, Infinity, 1e309) are refused too:
they are not JSON (RFC 8259), and PostgreSQL and SQLite's JSON_VALID reject them. So is
text with a NUL character (\u0000) or a lone surrogate (runtime.storable): no database keeps it.
And so is an integer past a float's range (10**400): math.isfinite, every check of a number, raises on it.
"""
from __future__ import annotations

import json
import sys
from typing import Any

from django.conf import settings

from runtime.storable import UNSTORABLE, value_unstorable


class JSONLimitError(ValueError):
    """The text is not acceptable JSON; the message says why, for the user."""


class JSONTooLarge(JSONLimitError):
    """Valid or not, the text is beyond the size or depth limits."""


def max_depth() -> int:
    return settings.AGENTOPS_JSON_MAX_DEPTH


def _refuse_constant(name: str):
    raise JSONLimitError(f"{name} is not a JSON number; use a finite number.")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise JSONLimitError(f"The number {text[:40]} is too large.")
    return value


def _finite_int(text: str) -> int:
    value = int(text)
    # Past a float's range an integer breaks every check for a finite number (math.isfinite raises).
    if len(text) > 308 and abs(value) > sys.float_info.max:
        raise JSONLimitError(f"The number {text[:40]} is too large.")
    return value


def check_depth(value: Any, *, limit: int | None = None) -> None:
    """Raise JSONLimitError when containers nest deeper than `limit` (iterative: no recursion)."""
    limit = max_depth() if limit is None else limit
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, (list, tuple)):
            children = node
        else:
            continue
        if depth > limit:
            raise JSONTooLarge(f"JSON nested more than {limit} levels deep is refused.")
        stack.extend((child, depth + 1) for child in children)


def loads(text: str | bytes, *, max_bytes: int | None = None) -> Any:
    """Parse JSON text within the size and depth limits; JSONLimitError otherwise."""
    max_bytes = settings.AGENTOPS_JSON_FIELD_MAX_BYTES if max_bytes is None else max_bytes
    size = len(text.encode(errors="surrogatepass") if isinstance(text, str) else text)
    if size > max_bytes:
        raise JSONTooLarge(f"JSON text is {size} bytes; the limit is {max_bytes}.")
    try:
        if isinstance(text, bytes):
            # Strict UTF-8 (json.loads would let the bytes of a lone surrogate through as one).
            text = text.decode("utf-8-sig")
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float,
                           parse_int=_finite_int)
    except RecursionError:
        raise JSONTooLarge(f"JSON nested more than {max_depth()} levels deep is refused.") from None
    except JSONLimitError:
        raise
    except ValueError as exc:  # JSONDecodeError and undecodable bytes
        raise JSONLimitError(f"Not valid JSON: {exc}") from None
    check_depth(value)
    if value_unstorable(value, text):
        raise JSONLimitError(f"JSON {UNSTORABLE}.")
    return value
