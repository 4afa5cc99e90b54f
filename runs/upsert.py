"""One way to add grouped rows to a counting table: INSERT ... SELECT ... ON CONFLICT DO UPDATE.

The dashboard's rollup, the usage rollup and the failure groups all count what a finished run
adds, in the transaction that finishes it, with one statement per table.
"""
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db import connection
from django.db.models import QuerySet


def upsert_sql(grouped: QuerySet | Sequence[QuerySet], model, *, keys: Sequence[str], sums: Sequence[str] = (),
               low: Sequence[str] = (), high: Sequence[str] = (), keep: Sequence[str] = (),
               sources: Sequence[str] = (), stamp: datetime | None = None) -> tuple[str, tuple]:
    """The statement that adds `grouped` (a queryset, or several read as one UNION ALL) to `model`'s table.

    `keys` are the conflict key; `keep` columns are written on a new row and left alone after; `sums`
    are added to, `low` keep the least and `high` the greatest value. `sources` name the grouped columns
    that fill them, in that order (by default the same names). `stamp` fills the table's created_at on
    a new row."""
    targets = [*keys, *keep, *sums, *low, *high]
    sources = list(sources or targets)
    parts = [grouped] if isinstance(grouped, QuerySet) else list(grouped)
    compiled = [(part if part.query.combinator else part.values_list(*sources)).query.sql_with_params()
                for part in parts]
    quote = connection.ops.quote_name
    plain = ", ".join(quote(c) for c in sources)
    rows = compiled[0][0] if len(compiled) == 1 else " UNION ALL ".join(
        f"SELECT {plain} FROM ({sql}) AS part{n}" for n, (sql, _) in enumerate(compiled))
    params: tuple = tuple(p for _, part_params in compiled for p in part_params)
    table = quote(model._meta.db_table)
    least, greatest = ("LEAST", "GREATEST") if connection.vendor == "postgresql" else ("MIN", "MAX")
    updates = ", ".join([f"{quote(c)} = {table}.{quote(c)} + EXCLUDED.{quote(c)}" for c in sums]
                        + [f"{quote(c)} = {least}({table}.{quote(c)}, EXCLUDED.{quote(c)})" for c in low]
                        + [f"{quote(c)} = {greatest}({table}.{quote(c)}, EXCLUDED.{quote(c)})" for c in high])
    columns = ", ".join(quote(c) for c in targets)
    selected = ", ".join(f"grouped.{quote(c)}" for c in sources)
    if stamp is not None:
        columns, selected = f"{columns}, {quote('created_at')}", f"{selected}, %s"
        params = (stamp, *params)   # its placeholder comes before the subquery's
    key = ", ".join(quote(c) for c in keys)
    order = ", ".join(f"grouped.{quote(c)}" for c in sources[:len(keys)])
    # "WHERE true" lets SQLite parse ON CONFLICT after INSERT ... SELECT. ORDER BY the key: transactions
    # counting at once then lock shared rows in one order, and queue instead of deadlocking.
    return (f"INSERT INTO {table} ({columns}) SELECT {selected} FROM ({rows}) AS grouped WHERE true "
            f"ORDER BY {order} ON CONFLICT ({key}) DO UPDATE SET {updates}", params)


def upsert(grouped: QuerySet | Sequence[QuerySet], model, **options) -> None:
    """Run upsert_sql's statement now."""
    sql, params = upsert_sql(grouped, model, **options)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
