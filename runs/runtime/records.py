"""Frozen records built from JSON settings, whose numbers may arrive as text or the other kind."""
from __future__ import annotations

from dataclasses import fields
from typing import Any


def declared_numbers(cls: type, data: dict[str, Any]) -> dict[str, int | float]:
    """The int and float fields of the dataclass `cls` that `data` holds, each as its field's type."""
    return {f.name: (int if f.type == "int" else float)(data[f.name]) for f in fields(cls)
            if f.type in ("int", "float") and f.name in data}
