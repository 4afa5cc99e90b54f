"""THE table of capability kinds: one line a kind (see capabilities.kinds.base)."""
from __future__ import annotations

from capabilities.kinds import http, mcp, python
from capabilities.kinds.base import KindEntry

KINDS: dict[str, KindEntry] = {entry.kind: entry for entry in (
    python.KIND,
    http.KIND,
    mcp.KIND,
)}

BROWSER_KINDS = tuple(kind for kind, entry in KINDS.items() if entry.registered_in_browser)


def kind_entry(kind: str) -> KindEntry | None:
    return KINDS.get(str(kind))
