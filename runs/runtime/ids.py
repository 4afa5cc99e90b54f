"""Id sources for attempts and spans, injected into the controller like the clock.

Production uses random ids; scenarios and tests use a counter so that two runs of
the same scenario record the same ids.
"""
from __future__ import annotations

import uuid


class RandomIds:
    def new_id(self) -> str:
        return uuid.uuid4().hex


class SequentialIds:
    def __init__(self, prefix: str = "id") -> None:
        self.prefix = prefix
        self.count = 0

    def new_id(self) -> str:
        self.count += 1
        # 32 hex-ish characters like a uuid, so storage limits hold for both sources.
        return f"{self.prefix}{self.count:0{max(1, 32 - len(self.prefix))}d}"[-32:]
