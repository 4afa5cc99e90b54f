"""Executor for python capabilities: a registered function, run in a worker thread.

config: {"function": "module:qualname", "status_lookup": "module:qualname" (optional)}

A Python thread cannot be killed. When a call outlives its timeout the executor
stops waiting, reports `timeout` (side effect `unknown` for a state-changing
capability, since the function may still commit), and abandons the thread: it
runs to completion in the background (a daemon thread, so it never blocks
process exit) and its result or exception is discarded. Capabilities that can
stop early should watch `context.remaining_s()`.

A state-changing call is open (capabilities.executors.open_calls) until its thread
ends, whether or not the caller still waits: the unknown outcome of an abandoned
call is looked up only once it has ended, and its worker keeps the run until then.
"""
from __future__ import annotations

import contextlib
import inspect
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import jsonschema

from capabilities.executors import event_loop
from capabilities.executors.base import BaseExecutor, CapabilityError
from capabilities.executors.fence import Fence
from capabilities.executors.open_calls import OPEN_CALLS
from capabilities.kinds.python.registry import CallContext, accepts_context, definition_for, resolve
from runtime.capability import CapabilitySpec
from runtime.observation import ErrorCode, Observation


class CallTimedOut(Exception):
    pass


def call_with_timeout(function: Callable[[], Any], timeout_s: float, *,
                      on_thread_exit: Callable[[], None] | None = None) -> Any:
    """Run `function` in a fresh daemon thread; raise CallTimedOut if it is not done in time.

    A fresh thread per call (not a pool): an abandoned call must not hold a
    pool slot that the next call waits for.
    """
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            result = function()
            if inspect.isawaitable(result):
                result = event_loop.run(_awaited(result))
            outcome["result"] = result
        except BaseException as exc:  # carried to the caller's thread
            outcome["error"] = exc
        finally:
            if on_thread_exit is not None:
                with contextlib.suppress(Exception):
                    on_thread_exit()
            done.set()

    threading.Thread(target=target, name="capability-call", daemon=True).start()
    if not done.wait(timeout_s):
        raise CallTimedOut()
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("result")


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def close_thread_db_connections() -> None:
    """Close the Django connections this worker thread opened, if Django is in use.

    Django keeps one connection per thread; a fresh thread per call would leak
    one per call. Looked up in sys.modules so this module never imports Django.
    """
    django_db = sys.modules.get("django.db")
    if django_db is not None:
        django_db.connections.close_all()


class PythonExecutor(BaseExecutor):
    """`on_thread_exit` runs in the worker thread after each call (default: close
    that thread's Django database connections, when Django is loaded)."""

    def __init__(self, *, on_thread_exit: Callable[[], None] | None = close_thread_db_connections,
                 **kw: Any) -> None:
        super().__init__(**kw)
        self.on_thread_exit = on_thread_exit

    def _run(self, spec: CapabilitySpec, arguments: dict, *, idempotency_key: str | None, timeout_s: float,
             trace_id: str, span_id: str, fence: Fence | None = None) -> Observation:
        function = self._function(spec)
        call_arguments = dict(arguments)
        if accepts_context(function):
            call_arguments["context"] = CallContext(idempotency_key=idempotency_key, trace_id=trace_id,
                                                    span_id=span_id, deadline=time.monotonic() + timeout_s,
                                                    fence=fence)
        run_id = fence.run_id if fence is not None else None
        tracked = spec.changes_state
        if tracked:
            OPEN_CALLS.opened(run_id, idempotency_key)

        def ended() -> None:
            if tracked:   # before the thread's database connections are closed: a wake-up may use one
                OPEN_CALLS.closed(run_id, idempotency_key)
            if self.on_thread_exit is not None:
                self.on_thread_exit()

        try:
            result = call_with_timeout(lambda: function(**call_arguments), timeout_s, on_thread_exit=ended)
        except CallTimedOut:
            return self.fail(spec, ErrorCode.TIMEOUT, f"{spec.name} did not return within {timeout_s:g}s "
                             "(the call was abandoned; its result will be discarded)")
        except Exception as exc:
            return self._failure_for(spec, exc)
        return self.ok(spec, result)

    def _lookup(self, spec: CapabilitySpec, arguments: dict, *, idempotency_key: str | None,
                timeout_s: float, fence: Fence | None = None) -> tuple[bool, Any] | None:
        lookup = self._status_lookup(spec)
        if lookup is None:
            return None
        try:
            committed, result = call_with_timeout(lambda: lookup(dict(arguments), idempotency_key), timeout_s,
                                                  on_thread_exit=self.on_thread_exit)
        except CallTimedOut:
            return None
        return bool(committed), result

    def _function(self, spec: CapabilitySpec) -> Callable[..., Any]:
        path = spec.config.get("function")
        if not path:
            raise CapabilityError(ErrorCode.INVALID_ARGUMENTS, f"{spec.name} has no config.function")
        try:
            return resolve(path)
        except (ImportError, AttributeError, ValueError) as exc:
            # The code it names is gone: retrying will not bring it back.
            raise CapabilityError(ErrorCode.NOT_FOUND, f"capability function {path} not found: {exc}") from None

    def _status_lookup(self, spec: CapabilitySpec) -> Callable[..., Any] | None:
        if spec.config.get("status_lookup"):
            return resolve(spec.config["status_lookup"])
        definition = definition_for(self._function(spec))
        return definition.status_lookup if definition else None

    def _failure_for(self, spec: CapabilitySpec, exc: Exception) -> Observation:
        if isinstance(exc, CapabilityError):
            return self.fail(spec, exc.code, exc.message, retry_after_s=exc.retry_after_s,
                             side_effect=exc.side_effect)
        code, message = classify_exception(exc)
        return self.fail(spec, code, message)


def classify_exception(exc: BaseException) -> tuple[ErrorCode, str]:
    """Map a plain Python exception to an error code (order matters: subclasses first)."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, TimeoutError):
        return ErrorCode.TIMEOUT, text
    if isinstance(exc, PermissionError):
        return ErrorCode.PERMISSION_DENIED, text
    if isinstance(exc, ConnectionError):
        return ErrorCode.CONNECTION_ERROR, text
    if isinstance(exc, LookupError):
        # KeyError's str() is the quoted key; say what it was.
        return ErrorCode.NOT_FOUND, f"not found: {text}" if isinstance(exc, KeyError) else text
    if isinstance(exc, (ValueError, TypeError, jsonschema.ValidationError)):
        return ErrorCode.INVALID_ARGUMENTS, text
    return ErrorCode.SERVER_ERROR, f"{type(exc).__name__}: {text}"
