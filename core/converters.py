"""The path converter for object ids: `<id:pk>`.

Django's `<int:>` takes any run of digits, and an id past the database's integers made SQLite
raise OverflowError (a 500) in some lookups. Ids here are 64-bit at most, so an address with a
longer number names nothing: a 404, like any missing object.
"""
from __future__ import annotations


class IdConverter:
    regex = "[0-9]{1,18}"   # up to 999,999,999,999,999,999: within a signed 64-bit integer

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value: int) -> str:
        return str(value)
