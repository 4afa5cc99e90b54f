"""Query shapes that PostgreSQL plans well on tables of millions of rows, and one way to apply filters.

`column = ANY(ARRAY(subquery))` makes PostgreSQL compute the subquery once, first,
then probe an index per value. Written as a join or `IN (subquery)`, its planner may
instead walk a whole sort index or merge-join a whole table, because its estimate
assumes the matches are spread evenly (they need not be). Elsewhere (SQLite) a plain
`IN (subquery)` is already evaluated that way.
"""
from __future__ import annotations

from django.db import connection
from django.db.models import BooleanField, Q, QuerySet
from django.db.models.expressions import RawSQL


def narrowed(rows: QuerySet, filters, lookups: dict[str, str]) -> QuerySet:
    """`rows` narrowed by each of the `filters` that is set: `lookups` maps a filter's attribute
    to the field lookup its value goes to (a blank or False filter narrows nothing)."""
    for name, lookup in lookups.items():
        value = getattr(filters, name)
        if value:
            rows = rows.filter(**{lookup: value})
    return rows


def one_of(model, field: str, values: QuerySet):
    """A filter condition on `model`: its `field` is one of the single-column `values`."""
    if connection.vendor != "postgresql":
        return Q(**{f"{field}__in": values})
    quote = connection.ops.quote_name
    column = f"{quote(model._meta.db_table)}.{quote(model._meta.get_field(field).column)}"
    sql, params = values.query.sql_with_params()
    return RawSQL(f"{column} = ANY(ARRAY({sql}))", params, output_field=BooleanField())
