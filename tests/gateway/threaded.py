"""Async client code run in a thread of its own: Playwright's session event loop (the browser tests)
keeps a loop running in the test thread, where anyio.run / asyncio.run would refuse to start."""
from __future__ import annotations

import contextvars
import threading

import anyio


def run_in_thread(fn, *args, timeout: float = 300):
    """The thread runs in the test's context: what the test does there, it does in the test's project."""
    box: dict = {}
    context = contextvars.copy_context()

    def target():
        try:
            box["result"] = context.run(anyio.run, fn, *args)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="async-client")
    thread.start()
    thread.join(timeout)
    if "error" in box:
        raise box["error"]
    if thread.is_alive():
        raise TimeoutError(f"async client code still running after {timeout:g} s")
    return box["result"]
