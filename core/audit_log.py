"""The audit log as a list: every audit row, filtered by actor, action, object and time, read in
keyset pages (core.pagination) and exported whole as CSV or JSON. The page (core.views_audit) and
the API (core.api_audit) both validate their query with `AuditQuery` and read through here.

An object's page belongs to the app above this one that owns the object: each app registers, at
start, how to find the pages of its objects (`register_object_pages`), so rows link to a run, a
capability or an agent while core imports none of them.

Details are redacted where they are written (secrets are only ever named by their environment
variable; channel URLs are stored masked). What leaves here is masked once more, by key and by URL
password, so a secret slipped into a future audit row's details is still never shown.
"""
from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import QuerySet
from django.urls import reverse
from rest_framework import serializers

from core.models import AuditAction, AuditEvent
from core.pagination import KeysetPage, Ordering, keyset_page
from core.userinfo import without_userinfo

PER_PAGE = 50
MAX_PER_PAGE = 500
ORDERING = Ordering.of(("-created_at", "-id"))
REDACTED = "[redacted]"
# Keys whose string value would be a credential (a "prefix" or an "idempotency_key" is not one).
_SECRET_KEY = re.compile(r"password|passwd|secret|authorization|cookie|credential|api[-_]?key|private[-_]?key"
                         r"|(?:^|[-_])token$|^token$", re.IGNORECASE)
# Spreadsheets run a cell that starts with one of these as a formula (CSV injection).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


@dataclass(frozen=True)
class AuditFilters:
    actor: str = ""  # a username
    action: str = ""
    target_type: str = ""
    target_id: str = ""
    since: datetime | None = None  # inclusive
    until: datetime | None = None  # exclusive

    @property
    def any(self) -> bool:
        return any(vars(self).values())


class AuditFilterQuery(serializers.Serializer):
    """The audit log's filters, for the page, the API and the exports alike; a bad value is a 400 naming
    its field."""

    actor = serializers.RegexField(r"^[\w.@+-]+\Z", max_length=150, required=False,
                                   help_text="The username of whoever made the change.")
    action = serializers.ChoiceField(choices=AuditAction.choices, required=False,
                                     help_text="One of the audited actions.")
    target_type = serializers.RegexField(r"^[a-z_]+\Z", max_length=40, required=False,
                                         help_text="The kind of object changed (run, capability, approval, user, ...).")
    target_id = serializers.RegexField(r"^[\w.:@+-]+\Z", max_length=64, required=False,
                                       help_text="The object's id (with target_type).")
    since = serializers.DateTimeField(required=False, input_formats=["iso-8601", "%Y-%m-%d"],
                                      help_text="Rows at or after this time (ISO 8601, or a date).")
    until = serializers.DateTimeField(required=False, input_formats=["iso-8601", "%Y-%m-%d"],
                                      help_text="Rows before this time (ISO 8601, or a date).")

    def to_internal_value(self, data):
        # A filter form sends every field, the unused ones empty: an empty value is no filter.
        return super().to_internal_value({k: v for k, v in data.items() if v != ""})

    def validate(self, attrs):
        if attrs.get("target_id") and not attrs.get("target_type"):
            raise serializers.ValidationError({"target_id": "Give target_type with target_id."})
        since, until = attrs.get("since"), attrs.get("until")
        if since and until and until <= since:
            raise serializers.ValidationError({"until": "until must be later than since."})
        return attrs


class AuditQuery(AuditFilterQuery):
    """The filters, and which page: the page and GET /api/audit/."""

    after = serializers.CharField(max_length=200, required=False, help_text="The cursor of the next page.")
    before = serializers.CharField(max_length=200, required=False, help_text="The cursor of the previous page.")
    page_size = serializers.IntegerField(min_value=1, max_value=MAX_PER_PAGE, required=False,
                                         help_text=f"Rows per page (default {PER_PAGE}, at most {MAX_PER_PAGE}).")

    def validate(self, attrs):
        if attrs.get("after") and attrs.get("before"):
            raise serializers.ValidationError({"before": "Give after or before, not both."})
        return super().validate(attrs)


def filters_from(query: dict) -> AuditFilters:
    return AuditFilters(**{name: query[name] for name in
                           ("actor", "action", "target_type", "target_id", "since", "until") if query.get(name)})


def audit_events(*, filters: AuditFilters) -> QuerySet[AuditEvent]:
    """The rows matching the filters, newest first."""
    rows = AuditEvent.objects.select_related("actor")
    if filters.actor:
        rows = rows.filter(actor__username=filters.actor)
    if filters.action:
        rows = rows.filter(action=filters.action)
    if filters.target_type:
        rows = rows.filter(target_type=filters.target_type)
    if filters.target_id:
        rows = rows.filter(target_id=filters.target_id)
    if filters.since:
        rows = rows.filter(created_at__gte=filters.since)
    if filters.until:
        rows = rows.filter(created_at__lt=filters.until)
    return rows.order_by(*ORDERING.order_by())


def audit_page(*, filters: AuditFilters, per_page: int = PER_PAGE, after: str | None = None,
               before: str | None = None) -> KeysetPage:
    """One keyset page of rows (as AuditRow); raises core.pagination.InvalidCursor for a cursor not handed out."""
    page = keyset_page(audit_events(filters=filters), ordering=ORDERING, per_page=per_page, after=after, before=before)
    page.object_list = audit_rows(page.object_list)
    return page


# --- What a row shows ------------------------------------------------------------------------

ObjectPages = Callable[[list[str]], dict[str, str]]
_object_pages: dict[str, ObjectPages] = {}


def register_object_pages(target_type: str, pages: ObjectPages) -> None:
    """`pages(ids)` answers {id: URL of its page} for the ids of this type that have one."""
    _object_pages[target_type] = pages


def pages_by_id(url_name: str, kwarg: str) -> ObjectPages:
    """For objects whose page URL takes their integer id."""
    return lambda ids: {i: reverse(url_name, kwargs={kwarg: int(i)}) for i in ids if i.isdigit()}


@dataclass(frozen=True)
class AuditRow:
    id: int
    created_at: datetime
    actor: str | None  # None: the system (a sweep, a sync), or a user since deleted
    action: str
    action_label: str
    target_type: str
    target_id: str
    summary: str
    details: Any
    object_url: str | None

    @property
    def details_json(self) -> str:
        return json.dumps(self.details, indent=2, ensure_ascii=False, sort_keys=True, cls=DjangoJSONEncoder)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "created_at": self.created_at, "actor": self.actor, "action": self.action,
                "target_type": self.target_type, "target_id": self.target_id, "summary": self.summary,
                "details": self.details, "object_url": self.object_url}


def masked(value: Any, key: str = "") -> Any:
    """`value` with every string under a credential-like key, and every URL password, hidden."""
    if isinstance(value, dict):
        return {k: masked(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v, key) for v in value]
    if isinstance(value, str):
        if value and _SECRET_KEY.search(key):
            return REDACTED
        return without_userinfo(value, REDACTED, keep_user=True)
    return value


def _object_urls(events: list[AuditEvent]) -> dict[tuple[str, str], str]:
    wanted: dict[str, set[str]] = {}
    for event in events:
        if event.target_type in _object_pages:
            wanted.setdefault(event.target_type, set()).add(event.target_id)
    urls: dict[tuple[str, str], str] = {}
    for target_type, ids in wanted.items():
        for target_id, url in _object_pages[target_type](sorted(ids)).items():
            urls[target_type, target_id] = url
    return urls


def audit_rows(events: Iterable[AuditEvent]) -> list[AuditRow]:
    """The rows as shown, with links to their objects' pages (one query per kind of object)."""
    events = list(events)
    urls = _object_urls(events)
    labels = dict(AuditAction.choices)
    return [AuditRow(id=e.pk, created_at=e.created_at, actor=e.actor.get_username() if e.actor else None,
                     action=e.action, action_label=labels.get(e.action, e.action), target_type=e.target_type,
                     target_id=e.target_id, summary=masked(e.summary, "summary"), details=masked(e.details),
                     object_url=urls.get((e.target_type, e.target_id)))
            for e in events]


# --- Exports ---------------------------------------------------------------------------------

EXPORT_CHUNK = 500
CSV_COLUMNS = ("id", "created_at", "actor", "action", "target_type", "target_id", "summary", "details", "object_url")


def _export_rows(filters: AuditFilters) -> Iterator[AuditRow]:
    chunk: list[AuditEvent] = []
    for event in audit_events(filters=filters).iterator(chunk_size=EXPORT_CHUNK):
        chunk.append(event)
        if len(chunk) == EXPORT_CHUNK:
            yield from audit_rows(chunk)
            chunk = []
    yield from audit_rows(chunk)


def _cell(value: Any) -> str:
    text = "" if value is None else value.isoformat() if isinstance(value, datetime) else str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


def csv_chunks(filters: AuditFilters) -> Iterator[str]:
    """Every matching row as CSV, a line at a time (a header first); details as JSON in one cell."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)

    def line(values) -> str:
        buffer.seek(0)
        buffer.truncate()
        writer.writerow([_cell(v) for v in values])
        return buffer.getvalue()

    yield line(CSV_COLUMNS)
    for row in _export_rows(filters):
        record = row.as_dict()
        record["details"] = json.dumps(row.details, ensure_ascii=False, sort_keys=True, cls=DjangoJSONEncoder)
        yield line(record[c] for c in CSV_COLUMNS)


def json_chunks(filters: AuditFilters) -> Iterator[str]:
    """Every matching row as one JSON array, an item at a time."""
    yield "["
    for n, row in enumerate(_export_rows(filters)):
        yield ("," if n else "") + "\n" + json.dumps(row.as_dict(), ensure_ascii=False, cls=DjangoJSONEncoder)
    yield "\n]\n"
