"""Where a call's coroutine runs: on an event loop of its own, or in a gevent worker on the process's one.

asyncio keeps "the running loop" per OS thread, and gevent's greenlets (the "threads" of a
`--pool gevent` worker, monkey-patched) all share one OS thread. Two greenlets that each
`asyncio.run()` see each other's loop and fail ("asyncio.run() cannot be called from a running
event loop"), and so does any `asyncio.run()` beside the stdio MCP pool's loop. In a green process
every coroutine therefore runs on one process-wide loop (in a greenlet of its own), which the
stdio MCP pool uses too; the caller's greenlet waits for its result. Elsewhere (threads, prefork,
the web) nothing changes: each call runs its own loop in its own thread.
"""
from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Coroutine
from typing import Any


def green() -> bool:
    """Whether this process's threads are greenlets (gevent's monkey patching)."""
    monkey = sys.modules.get("gevent.monkey")
    return bool(monkey is not None and monkey.is_module_patched("threading"))


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Run `coroutine` to its end from a (green or real) thread that runs no loop, and return its result."""
    if not green():
        return asyncio.run(coroutine)
    return asyncio.run_coroutine_threadsafe(coroutine, shared_loop()).result()


_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None


def shared_loop() -> asyncio.AbstractEventLoop:
    """The process's one loop, started on first use (anew in a forked child, which has no thread of it)."""
    global _loop, _thread
    with _lock:
        if _loop is None or _thread is None or not _thread.is_alive():
            _loop = asyncio.new_event_loop()
            _thread = threading.Thread(target=_loop.run_forever, name="event-loop", daemon=True)
            _thread.start()
        return _loop


def _forget_after_fork() -> None:
    global _loop, _thread, _lock
    _lock, _loop, _thread = threading.Lock(), None, None


os.register_at_fork(after_in_child=_forget_after_fork)
