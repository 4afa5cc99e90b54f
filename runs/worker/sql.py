"""Values bound by hand for the worker's hot path: the pass's one statement and the fenced UPDATE.

A worker process advancing many runs at once is CPU-bound under the GIL, so what each pass
pays in Python decides how many runs one process can carry. Django's field machinery
(get_db_prep_save per field, a model instance per row, the connection proxy) cost as much
CPU as the statement's round trip; here each model's column list, casts and converters are
worked out once, and on PostgreSQL JSON travels through orjson (a 20 KB checkpoint: ~0.013
ms against ~0.24 ms for the standard library on the 2-core machine).

On SQLite every value still goes through Django's own conversion (its datetimes and JSON
are stored as Django writes them); that is the embedded default, not the fast path.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from enum import Enum
from typing import Any

import orjson
import psycopg
from django.db import connection, models
from psycopg.types.json import Jsonb

# Fields whose Python value PostgreSQL takes as it is (the statement casts each column).
_PLAIN = (models.CharField, models.TextField, models.IntegerField, models.FloatField, models.BooleanField,
          models.DateTimeField, models.ForeignKey)


def json_bytes(value: Any) -> bytes:
    """JSON for a jsonb column: orjson, or the standard library for what orjson declines (integers
    beyond 64 bits, nesting deeper than 254 levels), so what is accepted is what was accepted before."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value).encode()


def binder(field: models.Field, vendor: str) -> Callable[[Any], Any]:
    """How one field's value becomes a query parameter on `vendor`, chosen once per field."""
    if vendor == "postgresql" and isinstance(field, models.JSONField):
        return lambda value: None if value is None else Jsonb(value, dumps=json_bytes)
    if vendor == "postgresql" and isinstance(field, _PLAIN):
        return lambda value: value.value if isinstance(value, Enum) else value
    return lambda value: field.get_db_prep_save(value, connection)


class Columns:
    """A model's concrete columns (primary key aside) for a hand-written INSERT, worked out once
    per database vendor: the column list, each value's cast, its binder and its default."""

    _cache: dict[tuple[type, str], Columns] = {}

    def __init__(self, model: type[models.Model], vendor: str) -> None:
        qn = connection.ops.quote_name
        # A generated column (Run.final_*) is the database's to write.
        fields = [f for f in model._meta.concrete_fields if not f.primary_key and not f.generated]
        self.head = f"INSERT INTO {qn(model._meta.db_table)} ({', '.join(qn(f.column) for f in fields)})"
        # (attname, placeholder, binder, default): a bare literal in INSERT ... SELECT would be text,
        # so each value is cast to its column's type; auto_now fields default to the pass's time.
        self.columns = [(f.attname, f"CAST(%s AS {f.cast_db_type(connection)})", binder(f, vendor),
                         _NOW if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False)
                         else f.get_default)
                        for f in fields]
        # name -> ("column" = %s, binder), for hand-written UPDATEs.
        self.sets = {f.name: (f"{qn(f.column)} = %s", to_param)
                     for f, (_a, _p, to_param, _d) in zip(fields, self.columns, strict=False)}
        self.sets.update({f.attname: self.sets[f.name] for f in fields})

    @classmethod
    def of(cls, model: type[models.Model]) -> Columns:
        key = (model, connection.vendor)
        if key not in cls._cache:
            cls._cache[key] = cls(model, key[1])
        return cls._cache[key]


_NOW = object()


def insert_from(model: type[models.Model], values: dict[str, Any] | list[dict[str, Any]], source: str, *, now,
                **columns_sql: str | None) -> tuple[str, list[Any]]:
    """`INSERT ... SELECT <values> FROM source` for one row given as {attname: value} (or for a
    list of rows, `FROM source CROSS JOIN (VALUES ...)`), so it is written only when `source` (a
    CTE) has a row. Missing fields take their default (auto_now ones `now`); `columns_sql`
    replaces a column's value by SQL (attempt_id="a.id")."""
    columns = Columns.of(model)
    bound = [(attname, placeholder) for attname, placeholder, *_rest in columns.columns if not columns_sql.get(attname)]
    rows = values if isinstance(values, list) else [values]
    params = [param for row in rows for param in _row_params(columns, row, now, skip=columns_sql)]
    if not isinstance(values, list):
        selected = [columns_sql.get(attname) or placeholder for attname, placeholder, *_rest in columns.columns]
        return f"{columns.head} SELECT {', '.join(selected)} FROM {source}", params
    # Many rows as one VALUES list: PostgreSQL plans it as one scan (a UNION ALL of a SELECT per
    # row took gigabytes to plan at thousands of rows).
    names = {attname: f"v.c{n}" for n, (attname, _placeholder) in enumerate(bound)}
    selected = [columns_sql.get(attname) or names[attname] for attname, *_rest in columns.columns]
    row_sql = f"({', '.join(placeholder for _attname, placeholder in bound)})"
    aliases = ", ".join(f"c{n}" for n in range(len(bound)))
    return (f"{columns.head} SELECT {', '.join(selected)} FROM {source} "
            f"CROSS JOIN (VALUES {', '.join([row_sql] * len(rows))}) AS v({aliases})"), params


def _row_params(columns: Columns, row: dict[str, Any], now, skip: dict[str, Any] | None = None) -> list[Any]:
    """One row's parameters in column order, a missing field's its default (auto_now ones `now`);
    the columns named (with SQL) in `skip` bind nothing."""
    return [to_param(row[attname] if attname in row else now if default is _NOW else default())
            for attname, _placeholder, to_param, default in columns.columns if not (skip and skip.get(attname))]


_NUMBERED: dict[str, str] = {}


def numbered(sql: str) -> str:
    """`%s` placeholders as PostgreSQL's own `$1, $2, ...`, worked out once per statement text.

    psycopg parses a query's placeholders on every execution once it has more than 50
    parameters (its cache stops there): for the pass's statement (about 50) and a plan's
    steps (13 per step) that parse cost more CPU than the rest of the statement. The
    statements here hold no other `%`."""
    converted = _NUMBERED.get(sql)
    if converted is None:
        parts = sql.split("%s")
        converted = parts[0] + "".join(f"${n}{part}" for n, part in enumerate(parts[1:], start=1))
        if len(_NUMBERED) > 512:  # a few shapes recur; bound it all the same
            _NUMBERED.clear()
        _NUMBERED[sql] = converted
    return converted


def execute(sql: str, params: list[Any], *, fetch: str = "one") -> Any:
    """Run one hand-written statement; its row (`fetch="one"`) or rows (`"all"`).

    On PostgreSQL the parameters travel apart from the SQL (a raw cursor, `$n` placeholders):
    Django's psycopg cursors bind client-side, which escaped a whole checkpoint into the SQL
    text on every pass. Through Django's cursor wrapper either way (query logging, execute
    wrappers)."""
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchone() if fetch == "one" else cursor.fetchall()
    connection.ensure_connection()
    raw = psycopg.RawCursor(connection.connection)
    with connection.make_debug_cursor(raw) if connection.queries_logged else connection.make_cursor(raw) as cursor:
        cursor.execute(numbered(sql), params)
        return cursor.fetchone() if fetch == "one" else cursor.fetchall()


def insert_rows(model: type[models.Model], rows: list[dict[str, Any]], *, now,
                returning: tuple[str, ...]) -> list[tuple]:
    """Many rows in one `INSERT ... VALUES ... RETURNING` (each row {attname: value}, missing fields
    their defaults); the returned columns per row, in order. A plan's steps are written this way:
    Django's bulk_create cost four times as much CPU for twenty steps. Needs RETURNING (PostgreSQL,
    SQLite 3.35+). Rows beyond what one statement may bind (max_params) go in further statements."""
    columns = Columns.of(model)
    qn = connection.ops.quote_name
    fields = {f.attname: f.column for f in model._meta.concrete_fields}
    per_statement = max(1, max_params() // len(columns.columns))
    placeholders = f"({', '.join(['%s'] * len(columns.columns))})"
    returned: list[tuple] = []
    for start in range(0, len(rows), per_statement):
        chunk = rows[start:start + per_statement]
        params = [param for row in chunk for param in _row_params(columns, row, now)]
        sql = (f"{columns.head} VALUES {', '.join([placeholders] * len(chunk))} "
               f"RETURNING {', '.join(qn(fields[name]) for name in returning)}")
        returned += execute(sql, params, fetch="all")
    return returned


def max_params() -> int:
    """How many parameters one statement may bind: PostgreSQL's protocol counts them in 16 bits
    (a plan of 6,000 steps exceeded it), SQLite as its build allows (Django's figure)."""
    return connection.features.max_query_params or 65_535


_CONVERTERS: dict[tuple[type, str], tuple[list[str], list[tuple[Any, list]]]] = {}


def from_row(model: type[models.Model], values: Any) -> models.Model:
    """A model instance from its concrete columns as the database returned them (in the order of
    `_meta.concrete_fields`), each through the converters the ORM would apply (JSON parsed, datetimes
    made aware), so a row read by a hand-written statement is the instance a query would have built."""
    key = (model, connection.vendor)
    if key not in _CONVERTERS:
        entries = []
        for field in model._meta.concrete_fields:
            column = field.get_col(model._meta.db_table)
            entries.append((column, connection.ops.get_db_converters(column) + column.get_db_converters(connection)))
        _CONVERTERS[key] = ([field.attname for field in model._meta.concrete_fields], entries)
    names, entries = _CONVERTERS[key]
    converted = []
    for value, (column, converters) in zip(values, entries, strict=False):
        for converter in converters:
            value = converter(value, column, connection)
        converted.append(value)
    return model.from_db(connection.alias, names, converted)

