"""The database-specific SQL expressions runs' queries use (PostgreSQL and SQLite renderings side by side).

Each computes in the database what would otherwise be a Python callback or a parse per row.
"""
from __future__ import annotations

from datetime import datetime

from django.db.models import CharField, FloatField, Func, IntegerField

HOUR_S = 3600


class EpochSeconds(Func):
    """A moment as Unix seconds, computed by the database: 5,000 rows need no datetime parsing."""

    output_field = FloatField()

    def as_sql(self, compiler, connection, **extra_context):
        sql, params = compiler.compile(self.source_expressions[0])
        return f"CAST(EXTRACT(EPOCH FROM {sql}) AS double precision)", params  # numeric otherwise

    def as_sqlite(self, compiler, connection, **extra_context):
        sql, params = compiler.compile(self.source_expressions[0])
        # julianday() of the stored UTC text; 2440587.5 is the Unix epoch as a Julian day.
        return f"((julianday({sql}) - 2440587.5) * 86400.0)", params


class EpochHour(Func):
    """Whole hours since the Unix epoch (UTC) of a timestamp, exactly (no float rounding)."""

    output_field = IntegerField()

    def as_sql(self, compiler, connection, **extra_context):
        sql, params = compiler.compile(self.source_expressions[0])
        return f"CAST(FLOOR(EXTRACT(EPOCH FROM {sql}) / {HOUR_S}) AS INTEGER)", params

    def as_sqlite(self, compiler, connection, **extra_context):
        sql, params = compiler.compile(self.source_expressions[0])
        return f"(CAST(strftime('%%s', {sql}) AS INTEGER) / {HOUR_S})", params


class EpochDay(Func):
    """Whole days since the Unix epoch (UTC) of a timestamp (failure groups' trend)."""

    output_field = IntegerField()

    def as_sql(self, compiler, connection, **extra_context):  # type: ignore[override]
        sql, params = compiler.compile(self.source_expressions[0])
        return f"CAST(FLOOR(EXTRACT(EPOCH FROM {sql}) / 86400) AS INTEGER)", params

    def as_sqlite(self, compiler, connection, **extra_context):
        sql, params = compiler.compile(self.source_expressions[0])
        return f"(CAST(strftime('%%s', {sql}) AS INTEGER) / 86400)", params


class SecondsBetween(Func):
    """Seconds from one timestamp to another, as a float."""

    output_field = FloatField()

    def as_sql(self, compiler, connection, **extra_context):
        (earlier, p1), (later, p2) = (compiler.compile(e) for e in self.source_expressions)
        return f"EXTRACT(EPOCH FROM ({later} - {earlier}))::float", (*p2, *p1)

    def as_sqlite(self, compiler, connection, **extra_context):
        (earlier, p1), (later, p2) = (compiler.compile(e) for e in self.source_expressions)
        return f"((julianday({later}) - julianday({earlier})) * 86400.0)", (*p2, *p1)


class BucketIndex(Func):
    """The bucket (0, 1, ...) a moment falls in, counting from `start` in steps of `seconds`.

    Computed with the database's own date arithmetic: Django's Trunc functions
    are a Python callback per row on SQLite, about a second per 100,000 runs.
    """

    output_field = IntegerField()

    def __init__(self, expression, *, start: datetime, seconds: float):
        super().__init__(expression)
        self.start_epoch = start.timestamp()
        self.seconds = float(seconds)

    def as_sql(self, compiler, connection, **extra_context):
        sql, params = compiler.compile(self.source_expressions[0])
        return (f"CAST(FLOOR((EXTRACT(EPOCH FROM {sql}) - %s) / %s) AS INTEGER)",
                (*params, self.start_epoch, self.seconds))

    def as_sqlite(self, compiler, connection, **extra_context):
        sql, params = compiler.compile(self.source_expressions[0])
        # julianday() of the stored UTC text; 2440587.5 is the Unix epoch as a Julian day.
        return (f"CAST(((julianday({sql}) - 2440587.5) * 86400.0 - %s) / %s AS INTEGER)",
                (*params, self.start_epoch, self.seconds))


class IsoText(Func):
    """A timestamp as ISO 8601 UTC text with microseconds ("2026-12-01T15:00:00.123456Z"), made by
    the database: parsing 100,000 timestamps into datetimes only to format them again was a third
    of the trace download's time."""

    output_field = CharField()

    def as_sql(self, compiler, connection, **extra_context):
        sql, params = compiler.compile(self.source_expressions[0])
        return f"to_char({sql} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')", params

    def as_sqlite(self, compiler, connection, **extra_context):
        # Django stores UTC as "YYYY-MM-DD HH:MM:SS[.ffffff]".
        sql, params = compiler.compile(self.source_expressions[0])
        return (f"(replace(substr({sql}, 1, 19), ' ', 'T') || '.' || "
                f"substr(coalesce(nullif(substr({sql}, 21, 6), ''), '') || '000000', 1, 6) || 'Z')"), params
