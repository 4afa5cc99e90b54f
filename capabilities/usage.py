"""Calls, errors and p95 latency per capability, and its recent attempts, as the registry shows them.

The attempts carrying these figures belong to the runs app, which sits above this one: it
plugs its reader in when it starts (runs.apps), so the registry's pages show usage while
this app never imports runs. Without a reader (the runs app not installed) usage is empty.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

USAGE_WINDOW = timedelta(hours=24)


@dataclass(frozen=True)
class Usage:
    calls: int = 0
    errors: int = 0
    p95_latency_s: float | None = None

    @property
    def error_rate(self) -> float | None:
        return None if not self.calls else self.errors / self.calls


class UsageReader(Protocol):
    def usage(self, *, names: list[str] | None, now: datetime | None, window: timedelta) -> dict[str, Usage]: ...

    def recent_attempts(self, *, name: str, limit: int) -> Any: ...


_reader: UsageReader | None = None


def use_reader(reader: UsageReader) -> None:
    global _reader
    _reader = reader


def capability_usage(*, names: list[str] | None = None, now: datetime | None = None,
                     window: timedelta = USAGE_WINDOW) -> dict[str, Usage]:
    return _reader.usage(names=names, now=now, window=window) if _reader else {}


def capability_recent_attempts(*, name: str, limit: int = 20) -> Any:
    return _reader.recent_attempts(name=name, limit=limit) if _reader else []
