"""Id sources for attempts and spans, injected into the controller like the clock.

Production uses random ids; scenarios and tests use a counter so that two runs of
the same scenario record the same ids.
"""
from __future__ import annotations

import os
import threading

# Random bytes are read from the OS this many at a time. Each os.urandom() is a getrandom()
# system call made without the GIL: in a worker advancing 64 runs at once, a thread that lets
# go of the GIL for a call that returns at once then waits behind every busy thread to get it
# back, and a step drew two ids. The bytes are the same kernel randomness, only read in bulk.
_BATCH_BYTES = 4096


class _RandomBytes:
    """os.urandom, buffered; safe across threads and across fork (a child reads its own)."""

    def __init__(self) -> None:
        self._reset()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._lock = threading.Lock()  # a lock held by another thread at fork time stays held in the child
        self._buffer, self._at = b"", 0

    def take(self, n: int) -> bytes:
        with self._lock:
            if self._at + n > len(self._buffer):
                self._buffer, self._at = os.urandom(max(_BATCH_BYTES, n)), 0
            chunk = self._buffer[self._at:self._at + n]
            self._at += n
        return chunk


_random_bytes = _RandomBytes()


def random_hex(n_bytes: int) -> str:
    """`n_bytes` of OS randomness as hex (a 32-character id for 16): trace, span and attempt ids."""
    return _random_bytes.take(n_bytes).hex()


class RandomIds:
    def new_id(self) -> str:
        return random_hex(16)


class SequentialIds:
    def __init__(self, prefix: str = "id") -> None:
        self.prefix = prefix
        self.count = 0

    def new_id(self) -> str:
        self.count += 1
        # 32 hex-ish characters like a uuid, so storage limits hold for both sources.
        return f"{self.prefix}{self.count:0{max(1, 32 - len(self.prefix))}d}"[-32:]
