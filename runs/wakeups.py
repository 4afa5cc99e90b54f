"""Waking whoever waits on a run when a worker is done with it for now (the gateway's held calls).

A worker announces an agent-planned run at the end of each slice, once it let go of the run:
the call's attempt is recorded and the run wants its next plan, or it awaits an approval, or it
stopped. A web process listens once and wakes its waiters on that run, which then read the run
as a poll would. An announcement is a hint, never the record: it can be lost (Redis pub/sub is
at most once; a listener may be reconnecting; a datagram may find a full buffer), so a waiter
also re-reads on a backing-off timer.

The channel follows the broker: on Redis, PUBLISH on one channel per broker database; on the
embedded broker (one machine by construction), a datagram to the Unix socket of every listening
web process under VAR_DIR/wakeups/. Other brokers (RabbitMQ): no announcements, waiters poll.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import threading
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import redis
import redis.asyncio as aioredis
from django.conf import settings

log = logging.getLogger(__name__)

# AF_UNIX paths are at most 107 bytes (104 on macOS): a longer VAR_DIR listens not at all.
MAX_SOCKET_PATH = 100
# A Redis listener that lost its connection tries again after this, doubling up to the cap.
RECONNECT_FIRST_S, RECONNECT_MAX_S = 0.5, 10.0


class Waiters:
    """The events of this process's waiters, by run; touched only from the event loop's thread."""

    def __init__(self) -> None:
        self._events: dict[int, set[asyncio.Event]] = defaultdict(set)

    @contextlib.contextmanager
    def watch(self, run_id: int) -> Iterator[asyncio.Event]:
        event = asyncio.Event()
        self._events[run_id].add(event)
        try:
            yield event
        finally:
            events = self._events.get(run_id)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._events[run_id]

    def wake(self, run_id: int) -> None:
        for event in self._events.get(run_id, ()):
            event.set()

    def wake_all(self) -> None:
        """After a gap in listening: whatever was announced meanwhile, everyone re-reads."""
        for events in self._events.values():
            for event in events:
                event.set()


# -- the channels ------------------------------------------------------------------------------

class _RedisChannel:
    def __init__(self, url: str) -> None:
        self.url = url
        # Pub/sub ignores the database number: the channel carries it, so deployments sharing a
        # Redis server on different databases do not wake each other.
        self.name = f"agentops.run-wakeups.{urlsplit(url).path.strip('/') or '0'}"
        self._client: redis.Redis | None = None

    def send(self, run_id: int) -> None:
        if self._client is None:
            self._client = redis.Redis.from_url(self.url, socket_timeout=1, socket_connect_timeout=1)
        self._client.publish(self.name, str(run_id))

    async def listen(self, waiters: Waiters, started: asyncio.Event) -> None:
        delay = RECONNECT_FIRST_S
        while True:
            client = aioredis.Redis.from_url(self.url, socket_connect_timeout=2)
            try:
                async with client.pubsub() as pubsub:
                    await pubsub.subscribe(self.name)
                    started.set()
                    waiters.wake_all()   # announcements sent while not subscribed are gone
                    delay = RECONNECT_FIRST_S
                    async for message in pubsub.listen():
                        if message.get("type") == "message":
                            _wake(waiters, message.get("data"))
            except (redis.RedisError, OSError) as exc:
                log.warning("run wake-ups: Redis listener lost (%s); waiters poll until it is back", exc)
            finally:
                await client.aclose()
            started.set()
            await asyncio.sleep(delay)
            delay = min(delay * 2, RECONNECT_MAX_S)


class _SocketChannel:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._sender: socket.socket | None = None
        self._lock = threading.Lock()

    def send(self, run_id: int) -> None:
        with self._lock:
            if self._sender is None:
                self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._sender.setblocking(False)
            sender = self._sender
        payload = str(run_id).encode()
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self.folder):
                if not entry.name.endswith(".sock"):
                    continue
                try:
                    sender.sendto(payload, entry.path)
                except ConnectionRefusedError:   # its process is gone (killed): nobody will unlink it
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)
                except OSError:   # a full buffer, a socket going away: a lost hint, the waiter polls
                    pass

    async def listen(self, waiters: Waiters, started: asyncio.Event) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{os.getpid()}-{secrets.token_hex(3)}.sock"
        if len(str(path)) > MAX_SOCKET_PATH:
            log.warning("run wake-ups: %s is too long a socket path; held calls poll instead", path)
            started.set()
            await asyncio.Event().wait()
        receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        receiver.setblocking(False)
        receiver.bind(str(path))
        loop = asyncio.get_running_loop()

        def readable() -> None:
            while True:
                try:
                    data = receiver.recv(64)
                except (BlockingIOError, InterruptedError):
                    return
                _wake(waiters, data)

        loop.add_reader(receiver.fileno(), readable)
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            loop.remove_reader(receiver.fileno())
            receiver.close()
            with contextlib.suppress(OSError):
                path.unlink()


class _NoChannel:
    def send(self, run_id: int) -> None:
        pass

    async def listen(self, waiters: Waiters, started: asyncio.Event) -> None:
        started.set()
        await asyncio.Event().wait()


def _wake(waiters: Waiters, data) -> None:
    try:
        run_id = int(data)
    except (TypeError, ValueError):
        return
    waiters.wake(run_id)


_channel_lock = threading.Lock()
_channels: dict[str, object] = {}


def _channel():
    url = settings.CELERY_BROKER_URL
    with _channel_lock:
        if url not in _channels:
            scheme = urlsplit(url).scheme
            if scheme in ("redis", "rediss"):
                _channels[url] = _RedisChannel(url)
            elif scheme == "embedded":
                _channels[url] = _SocketChannel(settings.VAR_DIR / "wakeups")
            else:
                _channels[url] = _NoChannel()
        return _channels[url]


def announce(run_id: int) -> None:
    """Tell the web processes that a worker is done with the run for now. Never raises: a lost
    announcement costs a waiter one poll interval, nothing else."""
    try:
        _channel().send(run_id)
    except Exception as exc:  # noqa: BLE001 - a hint; the run's record is already committed
        log.debug("run %s: wake-up not sent (%s)", run_id, exc)


@contextlib.asynccontextmanager
async def listening():
    """Listen while inside (a web process's lifespan); yields the Waiters the listener wakes."""
    waiters = Waiters()
    started = asyncio.Event()
    task = asyncio.get_running_loop().create_task(_channel().listen(waiters, started))
    await started.wait()
    try:
        yield waiters
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
