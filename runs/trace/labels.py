"""How a trace names an attempt and what it was: plain words, shared by the trace page, its JSON and the
timeline's SVG (pure Python, so the SVG renderer needs nothing of Django)."""
from __future__ import annotations


def attempt_label(revision_number: int | None, step_key: str, number: int) -> str:
    """Unique within a run: revision · step # attempt, e.g. r2·s1#1."""
    return f"r{revision_number or '?'}·{step_key}#{number}"


def kind_label(kind: str) -> str:
    """What an attempt was, in the words a reviewer uses: never "repeated" for what a policy allowed."""
    return {"call": "call", "retry": "retry", "poll": "poll", "resolve": "idempotent re-send",
            "lookup": "status lookup"}.get(kind, kind)
