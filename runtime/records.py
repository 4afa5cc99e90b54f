"""Frozen records built from JSON settings, whose numbers may arrive as text or the other kind."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import Field, fields
from typing import Any, ClassVar, Protocol, TypeVar


class Record(Protocol):
    """Any dataclass instance (what dataclasses.fields() takes)."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]


R = TypeVar("R", bound=Record)


def declared_numbers(cls: type, data: dict[str, Any]) -> dict[str, int | float]:
    """The int and float fields of the dataclass `cls` that `data` holds, each as its field's type."""
    return {f.name: (int if f.type == "int" else float)(data[f.name]) for f in fields(cls)
            if f.type in ("int", "float") and f.name in data}


_FIELD_NAMES: dict[type, frozenset[str]] = {}


def replace(record: R, /, **changes: Any) -> R:
    """dataclasses.replace() for the runtime's frozen records, which have neither __post_init__ nor
    init=False fields nor slots: a copy of the instance's dict with the changes. A pass makes about
    seventeen of these; dataclasses.replace() re-reads every field through its __init__ (9 µs
    against 0.8 µs for a 25-field RunState on the 2-core machine)."""
    cls = type(record)
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(f.name for f in fields(cls))
    if not names.issuperset(changes):
        raise TypeError(f"{cls.__name__} has no field named {', '.join(sorted(set(changes) - names))}")
    copy = object.__new__(cls)
    copy.__dict__.update(record.__dict__)
    copy.__dict__.pop(MEMO, None)  # the copy's fields differ: its dict form is its own
    copy.__dict__.update(changes)
    return copy


MEMO = "_memo_dict"


def memo_dict(record: Any, build: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """A frozen record's to_dict(), built once: a step's progress and a history entry stay the same
    object from pass to pass until they change, and every pass writes the whole checkpoint. The
    dict is shared: read it, never change it."""
    cached: dict[str, Any] | None = record.__dict__.get(MEMO)
    if cached is None:
        cached = build()
        object.__setattr__(record, MEMO, cached)
    return cached
