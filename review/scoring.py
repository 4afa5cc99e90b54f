"""What a score's value may be under its config: one check for new scores, edits and display.

A config changed after scores were written (a category removed, a range narrowed) keeps those
scores readable: they show their value as written, flagged by `value_problem` as no longer fitting.
"""
from __future__ import annotations

import math
from typing import Any

from review.models import ScoreConfig, ScoreKind


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def value_problem(config: ScoreConfig, value: Any) -> str | None:
    """Why `value` (as JSON gives it) is not a value of `config`, or None when it is."""
    if config.kind == ScoreKind.BOOLEAN:
        return None if isinstance(value, bool) else "a boolean: true or false"
    if config.kind == ScoreKind.CATEGORICAL:
        if not isinstance(value, str):
            return f"one of the categories: {', '.join(config.categories)}"
        return None if value in config.categories else \
            f"unknown category {value[:60]!r}: choose one of {', '.join(config.categories)}"
    if not _number(value):
        return "a number"
    if config.min_value is not None and value < config.min_value:
        return f"at least {config.min_value:g}"
    if config.max_value is not None and value > config.max_value:
        return f"at most {config.max_value:g}"
    return None


def value_from_text(config: ScoreConfig, text: str) -> Any:
    """A form's text as the value JSON would carry (left as text when it does not parse: the check says why)."""
    text = (text or "").strip()
    if config.kind == ScoreKind.BOOLEAN:
        return {"yes": True, "true": True, "no": False, "false": False}.get(text.lower(), text)
    if config.kind == ScoreKind.NUMERIC:
        try:
            return float(text)
        except ValueError:
            return text
    return text


def stored(config: ScoreConfig, value: Any) -> dict[str, Any]:
    """The columns a (checked) value is kept in."""
    if config.kind == ScoreKind.CATEGORICAL:
        return {"number": None, "category": value}
    return {"number": float(value), "category": ""}


def score_value(score) -> Any:
    """A score's value as written, in its config's kind (bool, number or category name)."""
    if score.config.kind == ScoreKind.CATEGORICAL:
        return score.category
    if score.config.kind == ScoreKind.BOOLEAN:
        return score.number == 1.0 if score.number is not None else None
    return score.number


def shown_value(score) -> str:
    value = score_value(score)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
