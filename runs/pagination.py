"""Moved to core.pagination (the audit log pages with it too, and core sits below runs).

Kept so that imports of runs.pagination keep working; new code imports core.pagination."""
from core.pagination import (  # noqa: F401
    COUNT_CAP,
    InvalidCursor,
    KeysetPage,
    Ordering,
    capped_count,
    decode_cursor,
    encode_cursor,
    keyset_page,
)
