"""Large capability outputs, stored once by content hash in the database.

The database (not a local folder) so every worker on every machine and the web
can read what any worker stored.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

from capabilities.models import StoredOutput

URI_PREFIX = "db://outputs/"


class DatabaseOutputStore:
    """The executors' OutputStore: save(content, sha256) -> uri; read(uri) -> JSON."""

    def save(self, content: bytes, sha256: str) -> str:
        StoredOutput.objects.get_or_create(
            sha256=sha256, defaults={"size_bytes": len(content), "content": content.decode("utf-8")})
        return URI_PREFIX + sha256

    def read(self, uri: str) -> Any:
        return json.loads(StoredOutput.objects.get(sha256=uri.removeprefix(URI_PREFIX)).content)


def store_json(value: Any) -> StoredOutput:
    content = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()
    digest = hashlib.sha256(content).hexdigest()
    stored, _ = StoredOutput.objects.get_or_create(
        sha256=digest, defaults={"size_bytes": len(content), "content": content.decode("utf-8")})
    return stored


def stored_output_for(uri: str) -> StoredOutput | None:
    if not uri.startswith(URI_PREFIX):
        return None
    return StoredOutput.objects.filter(sha256=uri.removeprefix(URI_PREFIX)).first()
