"""runs.wakeups on the configured broker (the embedded one's Unix sockets, or Redis pub/sub): an
announcement from another thread wakes exactly the waiters on that run."""
from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import anyio
import pytest
from django.conf import settings

from runs import wakeups

RUN, OTHER = 10**12 + 7, 10**12 + 8   # ids no real run of this test session has


def test_an_announcement_wakes_the_waiters_on_that_run_only():
    async def go():
        async with wakeups.listening() as waiters:
            with waiters.watch(RUN) as first, waiters.watch(RUN) as second, waiters.watch(OTHER) as other:
                await anyio.to_thread.run_sync(wakeups.announce, RUN)   # as a worker thread does
                with anyio.fail_after(30):
                    await first.wait()
                    await second.wait()
                return other.is_set()

    # A thread of its own: after the browser tests, Playwright's event loop holds the test thread.
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(anyio.run, go).result(timeout=60) is False


def test_a_waiter_that_left_is_forgotten():
    waiters = wakeups.Waiters()
    with waiters.watch(RUN):
        pass
    waiters.wake(RUN)   # nobody left to wake: no error
    assert waiters._events == {}


def test_announcing_with_nobody_listening_is_harmless():
    wakeups.announce(RUN)


@pytest.mark.skipif(urlsplit(settings.CELERY_BROKER_URL).scheme != "embedded", reason="the embedded broker's channel")
def test_the_socket_of_a_killed_web_process_is_removed_by_the_next_announcement(tmp_path):
    left = tmp_path / "123-dead.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dead.bind(str(left))
    dead.close()   # as SIGKILL leaves it: the file stays, nobody reads it
    wakeups._SocketChannel(tmp_path).send(RUN)
    assert not left.exists()
