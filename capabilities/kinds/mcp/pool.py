"""Stdio MCP sessions kept alive per process: started once, reused, restarted when they die.

Starting a stdio server costs about half a second (a Python interpreter, the
SDK's imports, the initialize handshake), so a worker keeps one session per
server command line and sends every call of every run over it.

- All sessions live on one event loop in one daemon thread; callers (Celery
  worker threads, the web process) submit coroutines to it and wait with a
  timeout, so the caller's own event loop (if any) never matters.
- Each server's stderr goes to a real file (Celery replaces sys.stderr with a
  proxy that has no file descriptor, which made every call fail); the tail of
  that file is attached to a failed call's message.
- A session whose call timed out, or whose connection failed, is discarded and
  its server stopped: the next call starts a fresh one. A hung server cannot
  block later calls.
- `close_all()` stops every server; it runs at interpreter exit and when a
  Celery worker (or a prefork child) shuts down. After a fork the child starts
  with an empty pool: the parent's sessions belong to the parent's threads.
"""
from __future__ import annotations

import asyncio
import atexit
import contextlib
import hashlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from capabilities.executors import event_loop

STDERR_TAIL_CHARS = 2_000
STDERR_MAX_BYTES = 1_000_000   # a chatty server's log is cut back to nothing past this
START_TIMEOUT_S = 30.0
CLOSE_TIMEOUT_S = 5.0


class SessionFailed(Exception):
    """The session could not start or broke; `stderr` is the server's last words."""

    def __init__(self, error: BaseException, stderr: str, *, started: bool, sent: bool, reused: bool = False) -> None:
        super().__init__(str(error))
        self.error = error
        self.stderr = stderr
        self.started = started
        self.sent = sent
        self.reused = reused   # the session had served calls before: its server probably died meanwhile


class SessionTimeout(Exception):
    def __init__(self, stderr: str, *, started: bool, sent: bool) -> None:
        super().__init__("timeout")
        self.stderr = stderr
        self.started = started
        self.sent = sent


@dataclass
class _Session:
    key: str
    errlog_path: str
    client: Any = None
    ready: Future = field(default_factory=Future)
    stop: asyncio.Event | None = None
    task: asyncio.Task | None = None
    calls: int = 0
    dead: bool = False

    def stderr_tail(self) -> str:
        try:
            with open(self.errlog_path, encoding="utf-8", errors="replace") as handle:
                handle.seek(max(0, os.path.getsize(self.errlog_path) - STDERR_TAIL_CHARS * 4))
                return handle.read()[-STDERR_TAIL_CHARS:].strip()
        except OSError:
            return ""


class StdioPool:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[str, _Session] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.starts = 0   # servers started by this pool (for the bench and the tests)

    # -- the loop thread -------------------------------------------------------------------------

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        if event_loop.green():   # a loop of its own would clash with the process's one
            self._loop = event_loop.shared_loop()
            return self._loop
        if self._loop is None or not self._thread or not self._thread.is_alive():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="mcp-stdio-pool", daemon=True)
            thread.start()
            self._loop, self._thread = loop, thread
        return self._loop

    # -- calls -------------------------------------------------------------------------------------

    def run(self, params: Any, work: Callable[[Any], Awaitable[Any]], timeout_s: float, *,
            on_start: Callable[[], None] | None = None, mark_sent: Callable[[], None] | None = None) -> Any:
        """Run `work(client)` on the pooled session for these server parameters.

        Raises SessionTimeout or SessionFailed (with the stderr tail); a session
        that failed either way is discarded.
        """
        deadline = time.monotonic() + timeout_s
        session, fresh = self._session(params, on_start)
        try:
            session.ready.result(timeout=max(0.05, min(timeout_s, START_TIMEOUT_S)))
        # Read the stderr tail before discarding: discarding removes the log file.
        except FutureTimeout:
            stderr = session.stderr_tail()
            self._discard(session)
            raise SessionTimeout(stderr, started=False, sent=False) from None
        except BaseException as exc:
            stderr = session.stderr_tail()
            self._discard(session)
            raise SessionFailed(_leaf(exc), stderr, started=False, sent=False) from None
        sent = threading.Event()

        async def call() -> Any:
            sent.set()
            if mark_sent is not None:
                mark_sent()
            return await work(session.client)

        future = asyncio.run_coroutine_threadsafe(call(), self._ensure_loop())
        try:
            result = future.result(timeout=max(0.05, deadline - time.monotonic()))
        except FutureTimeout:
            future.cancel()
            stderr = session.stderr_tail()
            self._discard(session)   # a server that did not answer may be hung: never reuse it
            raise SessionTimeout(stderr, started=True, sent=sent.is_set()) from None
        except BaseException as exc:
            leaf = _leaf(exc)
            if _is_protocol_answer(leaf):
                raise   # the server answered with an error: the session is fine
            stderr = session.stderr_tail()
            self._discard(session)
            raise SessionFailed(leaf, stderr, started=True, sent=sent.is_set(), reused=not fresh) from None
        session.calls += 1
        return result

    def _session(self, params: Any, on_start: Callable[[], None] | None) -> tuple[_Session, bool]:
        key = _key(params)
        with self._lock:
            session = self._sessions.get(key)
            if session is not None and not session.dead and not (session.task and session.task.done()):
                return session, False
            if session is not None:
                self._discard_locked(session)
            if on_start is not None:
                on_start()   # e.g. the audit event: before the command runs, in the caller's thread
            fd, path = tempfile.mkstemp(prefix="agentops-mcp-stderr-", suffix=".log")
            os.close(fd)
            session = _Session(key=key, errlog_path=path)
            self._sessions[key] = session
            self.starts += 1
            loop = self._ensure_loop()
            loop.call_soon_threadsafe(self._start, session, params)
            return session, True

    def _start(self, session: _Session, params: Any) -> None:
        session.stop = asyncio.Event()
        session.task = asyncio.get_running_loop().create_task(self._hold(session, params))

    async def _hold(self, session: _Session, params: Any) -> None:
        """Own the session for its whole life: anyio scopes must be entered and left in one task."""
        from mcp import Client
        from mcp.client.stdio import stdio_client

        try:
            with open(session.errlog_path, "a", encoding="utf-8") as errlog:
                # "legacy": the initialize handshake every deployed server speaks.
                async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
                    session.client = client
                    if not session.ready.done():
                        session.ready.set_result(True)
                    await session.stop.wait()
        except BaseException as exc:  # noqa: BLE001 - reported to whoever waits for the start
            if not session.ready.done():
                session.ready.set_exception(exc)
        finally:
            session.dead = True
            if not session.ready.done():
                session.ready.set_exception(RuntimeError("the MCP server exited during start"))

    # -- discarding and closing -----------------------------------------------------------------

    def _discard(self, session: _Session) -> None:
        with self._lock:
            self._discard_locked(session)

    def _discard_locked(self, session: _Session) -> None:
        session.dead = True
        if self._sessions.get(session.key) is session:
            del self._sessions[session.key]
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._stop_soon, session)

    def _stop_soon(self, session: _Session) -> None:
        if session.stop is not None:
            session.stop.set()
        if session.task is not None:
            session.task.add_done_callback(lambda _t: _remove(session.errlog_path))
        else:
            _remove(session.errlog_path)

    def close_all(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Stop every server this process started (waits up to timeout_s for them to exit)."""
        with self._lock:
            sessions = list(self._sessions.values())
            for session in sessions:
                self._discard_locked(session)
        loop = self._loop
        if loop is None or loop.is_closed() or not sessions:
            return
        tasks = [s.task for s in sessions if s.task is not None]

        async def wait() -> None:
            if tasks:
                await asyncio.wait(tasks, timeout=timeout_s)

        with contextlib.suppress(Exception):  # shutting down: best effort
            asyncio.run_coroutine_threadsafe(wait(), loop).result(timeout=timeout_s + 1)

    def truncate_logs(self) -> None:
        for session in list(self._sessions.values()):
            try:
                if os.path.getsize(session.errlog_path) > STDERR_MAX_BYTES:
                    os.truncate(session.errlog_path, 0)
            except OSError:
                pass

    def size(self) -> int:
        return len(self._sessions)


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _key(params: Any) -> str:
    """One session per exact command line, environment and working directory."""
    raw = json.dumps([params.command, list(params.args), sorted((params.env or {}).items()), str(params.cwd or "")])
    return hashlib.sha256(raw.encode()).hexdigest()


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _is_protocol_answer(exc: BaseException) -> bool:
    """An error the server sent back (JSON-RPC error): the connection itself is fine."""
    from mcp.shared.exceptions import MCPError

    return isinstance(exc, MCPError) and exc.code not in (-32000, -32001)  # connection closed / request timeout


_POOL = StdioPool()


def pool() -> StdioPool:
    return _POOL


def _reset_after_fork() -> None:
    global _POOL
    _POOL = StdioPool()


os.register_at_fork(after_in_child=_reset_after_fork)
atexit.register(lambda: _POOL.close_all())
