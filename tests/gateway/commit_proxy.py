"""A TCP proxy between the product and a PostgreSQL cluster that can lose one write on its way, as a
network or a crashed pooler does: every byte is relayed unchanged until the proxy is armed with a
statement's pattern; then the first connection that sends a matching statement is cut where it becomes
durable: at the COMMIT of its transaction, or at the statement itself when it runs outside one
(autocommit: no BEGIN before it), either

- after the server has committed it (`ack_lost`: the effect is stored, the client only learns that its
  connection broke), or
- before the server sees it (`commit_lost`: the server rolls it back, or never runs it).

Protocol: the client's stream is read as PostgreSQL frontend messages (an untyped startup message, then
type byte + length) so a statement is recognised as a whole message; the server's stream is relayed as
bytes. The product must connect with `sslmode=disable` (the proxy reads plaintext)."""
from __future__ import annotations

import contextlib
import re
import socket
import struct
import threading

_NEGOTIATION_CODES = {80877103, 80877104}   # SSLRequest, GSSENCRequest: another startup message follows


class CommitProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._armed: tuple[str, re.Pattern[bytes]] | None = None
        self.cut = threading.Event()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="commit-proxy").start()

    def arm(self, mode: str, pattern: bytes) -> None:
        """Cut where the next statement matching `pattern` (a regex) becomes durable (mode ack_lost or
        commit_lost)."""
        assert mode in ("ack_lost", "commit_lost"), mode
        with self._lock:
            self._armed = (mode, re.compile(pattern))
            self.cut.clear()

    def close(self) -> None:
        self._closed = True
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            server = socket.create_connection(self.upstream, timeout=5)
        except OSError:
            client.close()   # the cluster is down: the client sees its connection refused as closed
            return
        server.settimeout(None)
        link = _Link(client, server)
        threading.Thread(target=self._relay_replies, args=(link,), daemon=True).start()
        self._relay_requests(link)

    def _relay_replies(self, link: _Link) -> None:
        while True:
            data = link.received(link.server)
            if not data:
                return
            if link.muted:
                # The server's answer to the cut COMMIT (ReadyForQuery ends it) is dropped, then both go.
                if b"Z\x00\x00\x00\x05" in data:
                    self.cut.set()
                    link.close()
                    return
                continue
            try:
                link.client.sendall(data)
            except OSError:
                link.close()
                return

    def _relay_requests(self, link: _Link) -> None:
        buffer, startup, marked, in_transaction = b"", True, False, False
        while True:
            data = link.received(link.client)
            if not data:
                return
            buffer += data
            while True:
                message, buffer, typed = _next_message(buffer, startup)
                if message is None:
                    break
                if startup and not (len(message) == 8 and struct.unpack("!I", message[4:8])[0] in _NEGOTIATION_CODES):
                    startup = False
                text = message[5:] if typed else b""
                simple = typed and message[:1] == b"Q"
                ending = simple and text.startswith((b"COMMIT", b"ROLLBACK"))
                mode = None
                with self._lock:
                    armed = self._armed
                    if armed is not None and typed:
                        if armed[1].search(text):
                            if in_transaction:
                                marked = True
                            else:
                                mode, self._armed = armed[0], None
                        elif marked and simple and text.startswith(b"COMMIT"):
                            mode, self._armed = armed[0], None
                if simple and text.startswith(b"BEGIN"):
                    in_transaction = True
                elif ending:
                    in_transaction = marked = False
                if mode == "commit_lost":
                    self.cut.set()
                    link.close()
                    return
                if mode == "ack_lost":
                    link.muted = True
                try:
                    link.server.sendall(message)
                except OSError:
                    link.close()
                    return


def _next_message(buffer: bytes, startup: bool) -> tuple[bytes | None, bytes, bool]:
    """The first whole frontend message in `buffer` (None until one has arrived), the rest, and whether it
    is typed (a type byte before its length)."""
    head = 0 if startup else 1
    if len(buffer) < head + 4:
        return None, buffer, not startup
    (length,) = struct.unpack("!I", buffer[head:head + 4])
    end = head + length
    if len(buffer) < end:
        return None, buffer, not startup
    return buffer[:end], buffer[end:], not startup


class _Link:
    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client, self.server, self.muted = client, server, False

    def received(self, end: socket.socket) -> bytes:
        """What `end` sent next; b"" once it is closed or fails, and then the link is closed."""
        try:
            data = end.recv(65536)
        except OSError:
            data = b""
        if not data:
            self.close()
        return data

    def close(self) -> None:
        for end in (self.client, self.server):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()
