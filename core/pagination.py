"""Keyset (cursor) pagination with a capped count, for lists over tables of millions.

A page is read as "the next N rows after this (value, id)" with a row comparison
that an index on (value, id) answers directly, so page 20,000 costs what page 1
costs; an OFFSET would walk every row before it. The total is counted exactly up
to COUNT_CAP rows (a LIMITed subquery); above that PostgreSQL's planner estimate
is shown ("about ..."), and elsewhere only that there are more.

An ordering is (value field, primary key), both in the same direction. A nullable
value puts its NULLs last in either direction, read as a second segment, so each
segment is one index range scan.
"""
from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import F, QuerySet
from django.db.models.fields.tuple_lookups import Tuple, TupleGreaterThan, TupleLessThan

from core import jsonlimits

COUNT_CAP = 10_000


class InvalidCursor(ValueError):
    """A cursor that this list did not hand out (edited, truncated or from another sort)."""


@dataclass(frozen=True)
class Ordering:
    field: str
    descending: bool
    nullable: bool = False

    @classmethod
    def of(cls, keys: tuple[str, str], *, nullable: frozenset[str] = frozenset()) -> Ordering:
        """From ("-created_at", "-id")-style keys; the second must be the primary key, same direction."""
        value, pk = keys
        if value.startswith("-") != pk.startswith("-") or pk.lstrip("-") not in ("id", "pk"):
            raise ValueError(f"keyset ordering needs (value, id) in one direction, not {keys}")
        field = value.lstrip("-")
        return cls(field, value.startswith("-"), field in nullable)

    def order_by(self, *, reverse: bool = False, placing_nulls: bool = True) -> list:
        """The display order (or its reverse), empty values last. Within a segment, where no value is
        empty, the plain order lets PostgreSQL scan a (value, id) index either way."""
        descending = self.descending != reverse
        value, pk = F(self.field), F("pk")
        nulls = ({"nulls_first": True} if reverse else {"nulls_last": True}) if self.nullable and placing_nulls else {}
        return [value.desc(**nulls), pk.desc()] if descending else [value.asc(**nulls), pk.asc()]


@dataclass(frozen=True)
class WalkFirst:
    """A condition the database checks well row by row but may plan badly: full-text search, whose
    matches PostgreSQL estimates term by term as if independent (two words of one message template
    estimated at 5,000 of 20M rows matched 333,000). Planned from the index it believed selective,
    the page read and sorted every match (1.5 s); walked along the list's order, it fills at once.

    A page is read first from the rows the list's order (`order`) reaches first, `walks` of them in
    turn, the condition checked on each (`apply(queryset, False)`: written so that no index serves
    it); only when that leaves the page short (the matches are rare, or fewer) is it read with
    `apply(queryset, True)`, which an index may serve. Either way the rows are the same: a walk
    covers the order's first rows. A count stops as early, once it has found more than its cap."""

    apply: Callable[[QuerySet, bool], QuerySet]
    order: list
    walks: tuple[int, ...] = (2_000, 20_000)

    def read(self, segment: QuerySet, limit: int) -> list:
        for walk in self.walks:
            rows = list(self.apply(segment.filter(pk__in=segment.values("pk")[:walk]), False)[:limit])
            if len(rows) >= limit:
                return rows
        return list(self.apply(segment, True)[:limit])

    def count_above(self, queryset: QuerySet, cap: int) -> int | None:
        """An estimate of how many rows of `queryset` meet the condition when the longest walk tells it
        is above `cap` (the walked rows' share that meets it, times the rows PostgreSQL plans for the
        list), else None: count them. PostgreSQL only."""
        walk = self.walks[-1]
        listed = planned_rows(queryset)
        if listed <= walk:
            return None   # the walk sees (about) every row: counting them costs no more
        walked = queryset.filter(pk__in=queryset.order_by(*self.order).values("pk")[:walk])
        found = self.apply(walked, False).order_by()[:cap + 1].count()
        estimate = round(found / walk * listed)
        return max(cap + 1, estimate) if found > cap or estimate > cap else None


@dataclass
class KeysetPage:
    object_list: list
    number: int
    has_next: bool
    has_previous: bool
    next_cursor: str | None
    previous_cursor: str | None
    count: int | None
    count_exact: bool
    per_page: int

    @property
    def num_pages(self) -> int | None:
        return max(1, math.ceil(self.count / self.per_page)) if self.count is not None else None

    @property
    def has_other_pages(self) -> bool:
        return self.has_next or self.has_previous

    @property
    def next_page_number(self) -> int:
        return self.number + 1

    @property
    def previous_page_number(self) -> int:
        return max(1, self.number - 1)


def encode_cursor(value: Any, pk: int) -> str:
    if isinstance(value, datetime):
        value = value.isoformat()
    raw = json.dumps([value, pk], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, model, ordering: Ordering) -> tuple[Any, int]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value, pk = jsonlimits.loads(raw)
        if not isinstance(pk, int) or isinstance(pk, bool) or not 0 < pk < 2**63:
            raise ValueError("the id is not a row's id")
        if value is None:
            if not ordering.nullable:
                raise ValueError("this ordering has no empty values")
            return None, pk
        field = model._meta.get_field(ordering.field)
        # A generated column's values are its output field's (GeneratedField.to_python takes anything).
        parsed = getattr(field, "output_field", field).to_python(value)
        if parsed is None:
            raise ValueError("no value")
        if isinstance(parsed, int) and not -2**63 <= parsed < 2**63:
            raise ValueError("the value is past any database integer")
        if isinstance(parsed, datetime) and parsed.tzinfo is not None:
            parsed = parsed.astimezone(UTC)   # year 1 at +05:00 is before year 1 in UTC: OverflowError
        return parsed, pk
    except (ValueError, TypeError, ValidationError, UnicodeDecodeError, OverflowError) as exc:
        raise InvalidCursor(f"Invalid page cursor ({exc}). Start again from the first page.") from None


def _after(queryset: QuerySet, ordering: Ordering, value: Any, pk: int, *, reverse: bool) -> QuerySet:
    """Rows strictly after (value, pk) in display order (or before it, reverse=True)."""
    later = TupleLessThan if ordering.descending != reverse else TupleGreaterThan
    return queryset.filter(later(Tuple(F(ordering.field), F("pk")), (value, pk)))


def _segments(queryset: QuerySet, ordering: Ordering, cursor: tuple[Any, int] | None, reverse: bool) -> list[QuerySet]:
    """The querysets to read, in order, from the cursor on (display order, or its reverse)."""
    pk_order = F("pk").desc() if ordering.descending != reverse else F("pk").asc()
    value_order = ordering.order_by(reverse=reverse, placing_nulls=False)
    if not ordering.nullable:
        rows = queryset if cursor is None else _after(queryset, ordering, *cursor, reverse=reverse)
        return [rows.order_by(*value_order)]
    filled = queryset.filter(**{f"{ordering.field}__isnull": False}).order_by(*value_order)
    empty = queryset.filter(**{f"{ordering.field}__isnull": True}).order_by(pk_order)
    later = TupleLessThan if ordering.descending != reverse else TupleGreaterThan
    if not reverse:  # display order: values, then the empty ones
        if cursor is None:
            return [filled, empty]
        if cursor[0] is None:
            return [empty.filter(**{"pk__lt" if ordering.descending else "pk__gt": cursor[1]})]
        return [_after(filled, ordering, *cursor, reverse=False), empty]
    if cursor is None:
        return [empty, filled]
    if cursor[0] is None:
        return [empty.filter(**{"pk__gt" if ordering.descending else "pk__lt": cursor[1]}), filled]
    return [filled.filter(later(Tuple(F(ordering.field), F("pk")), cursor))]


def _read(segments: list[QuerySet], limit: int, walk_first: WalkFirst | None = None) -> list:
    rows: list = []
    for segment in segments:
        wanted = limit - len(rows)
        rows += walk_first.read(segment, wanted) if walk_first else list(segment[:wanted])
        if len(rows) >= limit:
            break
    return rows


def capped_count(queryset: QuerySet, cap: int = COUNT_CAP,
                 walk_first: WalkFirst | None = None) -> tuple[int | None, bool]:
    """(count, exact): exact up to `cap`; above it PostgreSQL's estimate, or (None, False) elsewhere.
    With `walk_first`, of the rows of `queryset` that meet its condition."""
    if walk_first is not None and connection.vendor == "postgresql":
        above = walk_first.count_above(queryset, cap)
        if above is not None:
            return above, False
    narrowed = walk_first.apply(queryset, True) if walk_first else queryset
    counted = narrowed.order_by()[:cap + 1].count()
    if counted <= cap:
        return counted, True
    if connection.vendor == "postgresql":
        return max(cap + 1, planned_rows(narrowed)), False
    return None, False


def planned_rows(queryset: QuerySet) -> int:
    """How many rows PostgreSQL's planner expects the queryset to return."""
    plan = json.loads(queryset.order_by().explain(format="json"))
    return int(plan[0]["Plan"]["Plan Rows"])


def keyset_page(queryset: QuerySet, *, ordering: Ordering, per_page: int, after: str | None = None,
                before: str | None = None, number: int = 1, count_cap: int = COUNT_CAP,
                walk_first: WalkFirst | None = None) -> KeysetPage:
    """One page. `after`/`before` are cursors from a previous page; `number` only labels the page,
    except without a cursor, where it is served by OFFSET (links and bookmarks by page number).
    `walk_first`: a condition on the rows of `queryset`, read as WalkFirst says."""
    model = queryset.model
    narrowed = walk_first.apply(queryset, True) if walk_first else queryset
    count, exact = capped_count(queryset, count_cap, walk_first)
    number = max(1, number)
    if exact and count is not None and number > max(1, math.ceil(count / per_page)):
        number = max(1, math.ceil(count / per_page))
    if after or before:
        reverse = bool(before) and not after
        cursor = decode_cursor(after or before or "", model, ordering)
        rows = _read(_segments(queryset, ordering, cursor, reverse), per_page + 1, walk_first)
        more = len(rows) > per_page
        rows = rows[:per_page]
        if reverse:
            rows.reverse()
            has_previous, has_next = more, True
        else:
            has_previous, has_next = True, more
        if not has_previous:
            number = 1
    elif number > 1:
        offset = (number - 1) * per_page
        rows = list(narrowed.order_by(*ordering.order_by())[offset:offset + per_page + 1])
        has_next, has_previous = len(rows) > per_page, True
        rows = rows[:per_page]
    else:
        rows = _read(_segments(queryset, ordering, None, False), per_page + 1, walk_first)
        has_next, has_previous = len(rows) > per_page, False
        rows = rows[:per_page]

    def cursor_of(obj) -> str:
        return encode_cursor(getattr(obj, ordering.field), obj.pk)

    return KeysetPage(object_list=rows, number=number, has_next=has_next and bool(rows),
                      has_previous=has_previous and bool(rows),
                      next_cursor=cursor_of(rows[-1]) if rows else None,
                      previous_cursor=cursor_of(rows[0]) if rows else None,
                      count=count, count_exact=exact, per_page=per_page)
