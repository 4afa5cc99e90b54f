"""Executor for http capabilities (the standard library's http.client), every hop through the NetGuard.

config:
    url             "https://api.example.com/tickets"
    method          GET | POST | PUT | PATCH | DELETE (default GET)
    headers         {"Accept": "application/json"}        plain, stored values
    secret_headers  {"Authorization": "TICKETS_API_TOKEN"} header → env var NAME;
                    the value is read at call time, never stored or logged
    status_url      "https://api.example.com/ops/{idempotency_key}" (optional)
    allow_redirects true (default) | false
    max_response_bytes  10_000_000 (default)

GET sends the arguments as query parameters, every other method as a JSON body.
State-changing capabilities send `Idempotency-Key` and, in a run, `AgentOps-Fence`
(capabilities.executors.fence; the status lookup sends it too); every call sends
`traceparent`. A header value with a line break is refused before anything is
sent. Redirects are followed by hand (at most 5) so that each hop is checked by
the guard; secret headers are dropped when a redirect leaves the origin. Each
hop connects to the address the guard checked for it (DNS rebinding), with the
original Host header; for https the TLS server name and the certificate check
are for the host name, not the address. Reads keep their connection alive for
the next read to the same checked address (IdleConnections); state-changing
calls open and close their own. Environment
proxies are never used (http.client does not read them): a proxy would
resolve names itself. Responses are asked for uncompressed
(`Accept-Encoding: identity`): http.client does not decompress.

The call has one deadline (`timeout_s`): connecting, the TLS handshake,
sending and every read from the socket (status line, headers, body) wait only
for the time left, so a server trickling bytes cannot stretch the call.

Why http.client rather than httpx: CPU per call. A worker process advancing
64 runs at once is CPU-bound. Measured on loopback (2 cores), a whole
execute() cost ~0.9 ms of CPU with httpx (a client per call) and ~0.45 ms
with http.client; with 64 threads contending for the GIL, ~1.45 ms and ~0.45 ms.

A status URL answers 2xx when the operation committed (the body is its result,
or `{"committed": bool, "result": ...}`), 404 when it did not; anything else
means "cannot tell".
"""
from __future__ import annotations

import codecs
import email.utils
import functools
import http.client
import io
import json
import math
import os
import socket
import ssl
import struct
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode, urljoin, urlsplit, urlunsplit

import certifi

from capabilities.executors.base import BaseExecutor, CapabilityError, traceparent
from capabilities.executors.fence import FENCE_HEADER, IDEMPOTENCY_HEADER, Fence
from capabilities.executors.secrets import has_line_break, is_credential_header
from capabilities.netguard import NetGuard, Resolution, URLRefused
from runtime.capability import CapabilitySpec
from runtime.observation import ErrorCode, Observation, SideEffectStatus, error_code_for_http_status

METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})
MAX_REDIRECTS = 5
DEFAULT_MAX_RESPONSE_BYTES = 10_000_000
READ_CHUNK_BYTES = 65_536
# Keep-alive connections (reads only): how long one may wait idle for its next call, and how many
# wait per origin (about the number of runs a worker advances at once).
IDLE_SECONDS = 4.0
MAX_IDLE_PER_KEY = 64
# What a URL may carry unescaped in its query and its path (WHATWG, as httpx sent them): spaces,
# controls and non-ASCII are percent-encoded, existing %xx escapes kept.
QUERY_SAFE = "".join(chr(i) for i in range(0x21, 0x7F) if chr(i) not in '"#<>')
PATH_SAFE = "".join(c for c in QUERY_SAFE if c not in "?`{}")


@dataclass(frozen=True)
class Answer:
    status: int
    reason: str
    headers: http.client.HTTPMessage  # .get() is case-insensitive
    body: Any
    url: str


class HttpExecutor(BaseExecutor):
    def __init__(self, *, guard: NetGuard, environ: Mapping[str, str] | None = None,
                 tls: ssl.SSLContext | None = None, **kw: Any) -> None:
        """tls: the verifying context for https (tests trust their own CA); the process's shared one by default."""
        super().__init__(**kw)
        self.guard = guard
        self.environ = os.environ if environ is None else environ
        self.tls = tls if tls is not None else tls_context()

    # -- execute ----------------------------------------------------------------

    def _run(self, spec: CapabilitySpec, arguments: dict, *, idempotency_key: str | None, timeout_s: float,
             trace_id: str, span_id: str, fence: Fence | None = None) -> Observation:
        config = spec.config
        method = str(config.get("method", "GET")).upper()
        if method not in METHODS:
            raise CapabilityError(ErrorCode.INVALID_ARGUMENTS, f"unsupported HTTP method {method}")
        headers, secret_names = self._headers(config)
        headers["traceparent"] = traceparent(trace_id, span_id)
        if spec.changes_state and idempotency_key:
            headers[IDEMPOTENCY_HEADER] = idempotency_key
        if spec.changes_state and fence is not None:
            headers[FENCE_HEADER] = fence.token
        url = with_query(config["url"], query_params(arguments)) if method == "GET" else config["url"]
        body = None if method == "GET" else arguments
        answer = self._send(spec, method, url, headers=headers, secret_names=secret_names,
                            json_body=body, timeout_s=timeout_s,
                            allow_redirects=bool(config.get("allow_redirects", True)))
        if isinstance(answer, Observation):
            return answer
        return self._observe(spec, answer)

    def _observe(self, spec: CapabilitySpec, answer: Answer) -> Observation:
        extra = {"http_status": answer.status}
        code = error_code_for_http_status(answer.status)
        if code is None:
            if 300 <= answer.status < 400:
                extra["location"] = answer.headers.get("location", "")
            return self.ok(spec, answer.body, extra=extra)
        retry_after = retry_after_seconds(answer.headers.get("retry-after"))
        # 408: the server gave up before it had the whole request, so nothing
        # committed; 504 came from a gateway after forwarding it: unknown.
        side_effect = SideEffectStatus.NOT_COMMITTED if answer.status != 504 else None
        snippet = answer.body if isinstance(answer.body, str) else json.dumps(answer.body)
        message = f"HTTP {answer.status} {answer.reason}".rstrip() + (f": {snippet[:300]}" if answer.body else "")
        return self.fail(spec, code, message, side_effect=side_effect, output=answer.body,
                         retry_after_s=retry_after, extra=extra)

    # -- status lookup ------------------------------------------------------------

    def _lookup(self, spec: CapabilitySpec, arguments: dict, *, idempotency_key: str | None,
                timeout_s: float, fence: Fence | None = None) -> tuple[bool, Any] | None:
        template = spec.config.get("status_url")
        if not template or ("{idempotency_key}" in template and not idempotency_key):
            return None
        url = template.replace("{idempotency_key}", quote(idempotency_key or "", safe=""))
        headers, secret_names = self._headers(spec.config)
        if fence is not None:
            headers[FENCE_HEADER] = fence.token
        answer = self._send(spec, "GET", url, headers=headers, secret_names=secret_names, json_body=None,
                            timeout_s=timeout_s, allow_redirects=True)
        if isinstance(answer, Observation):
            return None
        if answer.status == 404:
            return False, None
        if not 200 <= answer.status < 300:
            return None
        body = answer.body
        if isinstance(body, dict) and isinstance(body.get("committed"), bool):
            return body["committed"], body.get("result")
        return True, body

    # -- the wire -------------------------------------------------------------------

    def _headers(self, config: Mapping[str, Any]) -> tuple[dict[str, str], set[str]]:
        # Some APIs refuse a request without a User-Agent (httpx sent its own; http.client sends none).
        headers = {"Accept": "application/json", "User-Agent": "AgentOps"}
        for header, value in (config.get("headers") or {}).items():
            header, value = str(header), str(value)
            if has_line_break(header) or has_line_break(value):
                # It would end the header and start another (header injection); the value is not quoted.
                raise CapabilityError(ErrorCode.INVALID_ARGUMENTS,
                                      f"header {header.strip()!r} is unusable: it contains a line break")
            headers[header] = value
        secret_names = set()
        for header, env_var in (config.get("secret_headers") or {}).items():
            value = self.environ.get(env_var)
            if not value:
                # Name the variable, never a value.
                raise CapabilityError(ErrorCode.PERMISSION_DENIED,
                                      f"secret for header {header} is missing: environment variable {env_var} is not set")
            if has_line_break(value):
                # http.client would quote the value in its error: refuse before anything sees it.
                raise CapabilityError(ErrorCode.PERMISSION_DENIED,
                                      f"secret for header {header} is unusable: environment variable {env_var} "
                                      "contains a line break")
            headers[header] = value
            secret_names.add(header.lower())
        return headers, secret_names

    def _send(self, spec: CapabilitySpec, method: str, url: str, *, headers: dict[str, str], secret_names: set[str],
              json_body: Any, timeout_s: float,
              allow_redirects: bool) -> Answer | Observation:
        deadline = time.monotonic() + timeout_s
        limit = int(spec.config.get("max_response_bytes", DEFAULT_MAX_RESPONSE_BYTES))
        try:
            body = None if json_body is None else request_body(json_body)
        except ValueError as exc:  # NaN or infinity: JSON has no such numbers
            return self.fail(spec, ErrorCode.INVALID_ARGUMENTS, f"the arguments cannot be sent as JSON: {exc}",
                             sent=False)
        for _hop in range(MAX_REDIRECTS + 1):
            try:
                target = self.guard.check(url)
            except URLRefused as exc:
                return self.fail(spec, ErrorCode.PERMISSION_DENIED, str(exc), sent=False)
            if time.monotonic() >= deadline:
                return self.fail(spec, ErrorCode.TIMEOUT, f"no time left before requesting {target.host}")
            answer = self._exchange(spec, target, method, headers, body, deadline, limit)
            if isinstance(answer, Observation):
                return answer
            location = answer.headers.get("location")
            if not (allow_redirects and location and answer.status in (301, 302, 303, 307, 308)):
                return answer
            next_url = urljoin(url, location)
            if origin(next_url) != origin(url):
                headers = {k: v for k, v in headers.items()
                           if k.lower() not in secret_names and not is_credential_header(k)}
            if answer.status == 303 or (answer.status in (301, 302) and method == "POST"):
                method, body = "GET", None
            url = next_url
        return self.fail(spec, ErrorCode.INVALID_ARGUMENTS, f"more than {MAX_REDIRECTS} redirects from {spec.config['url']}",
                         sent=False)

    def _exchange(self, spec: CapabilitySpec, target: Resolution, method: str, headers: dict[str, str],
                  body: bytes | None, deadline: float, limit: int, *, reuse: bool = True) -> Answer | Observation:
        """One request and its answer, on a connection to the checked address.

        A capability that changes nothing reuses an idle keep-alive connection to that same
        address when there is one (no new socket, TCP or TLS handshake), and if the server had
        closed it meanwhile the request goes once more on a new connection: a read is safe to
        repeat. A state-changing call always has a connection of its own, closed after it, so
        whether its request went out is never in doubt.
        """
        host = target.host
        keep_alive = not spec.changes_state
        key = (target.scheme, target.address, target.port, host, self.tls if target.scheme == "https" else None)
        connection = IDLE.take(key) if keep_alive and reuse else None
        reused = connection is not None
        if connection is None:
            connection = self._connection(target)
        arm(connection, deadline)
        give_back = False
        try:
            try:
                # Written into http.client's buffer only: nothing is sent before endheaders().
                connection.putrequest(method, request_target(target.url), skip_host=True, skip_accept_encoding=True)
                for name, value in wire_headers(headers, target, body, keep_alive=keep_alive).items():
                    connection.putheader(name, value)
            except ValueError:
                # http.client's message quotes the value it refused, which may be a secret: name neither.
                return self.fail(spec, ErrorCode.INVALID_ARGUMENTS,
                                 f"the request to {host} cannot be written: a header is not valid HTTP", sent=False)
            try:
                if not reused:
                    connection.connect()
                limit_socket(connection.sock, deadline)  # for sending
            except TimeoutError:
                return self.fail(spec, ErrorCode.TIMEOUT, f"connecting to {host} timed out", sent=False)
            except OSError as exc:  # refused, unreachable, or the TLS handshake (certificate) failed
                return self.fail(spec, ErrorCode.CONNECTION_ERROR, f"cannot connect to {host}: {exc}", sent=False)
            try:
                connection.endheaders(body)
                response = connection.getresponse()
            except (TimeoutError, BlockingIOError):  # BlockingIOError: SO_SNDTIMEO ran out mid-send
                return self.fail(spec, ErrorCode.TIMEOUT, f"{host} did not answer in time")
            except (http.client.HTTPException, OSError) as exc:
                if reused and isinstance(exc, ConnectionError):  # closed by the server while idle
                    return self._exchange(spec, target, method, headers, body, deadline, limit, reuse=False)
                return self._broken(spec, f"connection to {host} failed: {describe(exc)}")
            answer = self._receive(spec, response, target, limit)
            give_back = keep_alive and isinstance(answer, Answer) and not response.will_close
            return answer
        finally:
            if give_back:
                IDLE.give(key, connection)
            else:
                connection.close()

    def _receive(self, spec: CapabilitySpec, response: http.client.HTTPResponse, target: Resolution,
                 limit: int) -> Answer | Observation:
        host = target.host
        try:
            chunks, size = [], 0
            while chunk := response.read(READ_CHUNK_BYTES):
                size += len(chunk)
                if size > limit:
                    committed = spec.changes_state and 200 <= response.status < 300
                    return self.fail(spec, ErrorCode.INVALID_ARGUMENTS,
                                     f"response from {host} is larger than {limit} bytes; narrow the request",
                                     side_effect=SideEffectStatus.COMMITTED if committed else None,
                                     extra={"http_status": response.status})
                chunks.append(chunk)
            if response.length:
                # http.client ends a short read quietly when the server closes before Content-Length bytes.
                raise http.client.IncompleteRead(b"".join(chunks), response.length)
        except TimeoutError:
            return self.fail(spec, ErrorCode.TIMEOUT, f"{host} did not finish answering in time")
        except (http.client.HTTPException, OSError) as exc:
            return self._broken(spec, f"connection to {host} broke: {describe(exc)}")
        finally:
            response.close()
        return Answer(status=response.status, reason=response.reason, headers=response.headers,
                      body=parse_body(b"".join(chunks), response.headers), url=target.url)

    def _broken(self, spec: CapabilitySpec, message: str) -> Observation:
        """The connection broke once the request was going out: the callee may have acted."""
        return self.fail(spec, ErrorCode.CONNECTION_ERROR, message,
                         side_effect=SideEffectStatus.UNKNOWN if spec.changes_state else None)

    def _connection(self, target: Resolution) -> PinnedHTTPConnection | PinnedHTTPSConnection:
        """A connection to the address the guard checked, never to a second DNS answer."""
        if target.scheme == "https":
            return PinnedHTTPSConnection(target, context=self.tls)
        return PinnedHTTPConnection(target)


# -- the connection ----------------------------------------------------------------------

def arm(connection: PinnedHTTPConnection | PinnedHTTPSConnection, deadline: float) -> None:
    """Bind a connection (new or reused) to this call's deadline: connecting and every read."""
    connection.deadline = deadline
    connection.response_class = functools.partial(DeadlineResponse, deadline=deadline)


class IdleConnections:
    """Keep-alive connections between calls, shared by the worker's threads: per scheme, checked
    address, port, host name (TLS identity) and TLS context; only a connection whose last
    answer was read whole and did not ask to close is kept.

    The most recently used is taken first. One idle for IDLE_SECONDS is closed instead of
    reused: servers drop idle connections after 5 s (Node.js, Apache) to 75 s (nginx), and a
    read sent on one they dropped is sent again on a new connection anyway.
    """

    def __init__(self) -> None:
        self._forget()
        if hasattr(os, "register_at_fork"):  # a child must not share its parent's sockets
            os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[tuple, list[tuple[float, http.client.HTTPConnection]]] = {}
        self._pruned = 0.0

    def take(self, key: tuple) -> http.client.HTTPConnection | None:
        now = time.monotonic()
        with self._lock:
            idle = self._idle.get(key)
            connection = idle.pop()[1] if idle and now - idle[-1][0] < IDLE_SECONDS else None
            stale = self._expired(now, key)
        for old in stale:
            old.close()
        return connection

    def give(self, key: tuple, connection: http.client.HTTPConnection) -> None:
        now = time.monotonic()
        with self._lock:
            idle = self._idle.setdefault(key, [])
            idle.append((now, connection))
            surplus = [idle.pop(0)[1]] if len(idle) > MAX_IDLE_PER_KEY else []
            surplus += self._expired(now)
        for old in surplus:
            old.close()

    def _expired(self, now: float, key: tuple | None = None) -> list[http.client.HTTPConnection]:
        """Take out the connections idle for IDLE_SECONDS, for the caller to close outside the lock:
        `key`'s, and every origin's once per IDLE_SECONDS (one no longer called keeps its own
        until the next call to any origin). Each list is oldest first."""
        if now - self._pruned >= IDLE_SECONDS:
            self._pruned, names = now, list(self._idle)
        else:
            names = [key] if key in self._idle else []
        expired = []
        for name in names:
            idle = self._idle[name]
            while idle and now - idle[0][0] >= IDLE_SECONDS:
                expired.append(idle.pop(0)[1])
            if not idle:
                del self._idle[name]
        return expired


IDLE = IdleConnections()


class PinnedHTTPConnection(http.client.HTTPConnection):
    """Plain HTTP to the checked address, on a blocking socket whose deadline the kernel keeps.

    Why not Python's socket timeouts: with one, every socket call is a poll() and then the
    call, and each of them, like every settimeout(), lets go of the GIL. A worker thread that
    lets go of the GIL for a call that returns at once (a send, a connect on the LAN) then
    waits for it behind every other busy thread: with 64 runs in one process, a call's ten
    such hand-offs cost more than its Python. Here a call lets go five times (socket, connect,
    send, receive, close), and SO_SNDTIMEO / SO_RCVTIMEO, set without letting go, bound each
    wait by the time left. (TLS keeps Python's timeouts: the ssl module retries a timed-out
    read on a blocking socket forever.)
    """

    def __init__(self, target: Resolution) -> None:
        super().__init__(target.address, target.port)
        self.deadline = 0.0  # set for each call (arm)

    def connect(self) -> None:
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM)
        try:
            limit_socket(sock, self.deadline)
            try:
                sock.connect((self.host, self.port))
            except BlockingIOError:  # EINPROGRESS: SO_SNDTIMEO ran out before the handshake ended
                raise TimeoutError(f"connecting to {self.host} timed out") from None
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as http.client does
        except BaseException:
            sock.close()
            raise
        self.sock = sock


class PinnedHTTPSConnection(http.client.HTTPSConnection):
    """TLS to the checked address, with the server name (SNI) and the certificate check for the host name."""

    def __init__(self, target: Resolution, *, context: ssl.SSLContext) -> None:
        super().__init__(target.address, target.port, context=context)
        self.tls = context
        self.server_hostname = target.host
        self.deadline = 0.0  # set for each call (arm)

    def connect(self) -> None:
        self.timeout = seconds_left(self.deadline)
        http.client.HTTPConnection.connect(self)  # TCP to the address
        self.sock.settimeout(seconds_left(self.deadline))  # the handshake gets only what is left
        self.sock = self.tls.wrap_socket(self.sock, server_hostname=self.server_hostname)


class DeadlineResponse(http.client.HTTPResponse):
    """A response whose every read from the socket waits only for the time left before the deadline.

    A per-read socket timeout alone restarts with each byte: a server trickling
    its headers or body one byte at a time would hold the call for as long as it liked.
    """

    def __init__(self, sock: socket.socket, *, deadline: float, **kw: Any) -> None:
        super().__init__(sock, **kw)
        self.fp = io.BufferedReader(DeadlineReader(self.fp.detach(), sock, deadline))


class DeadlineReader(io.RawIOBase):
    def __init__(self, raw: io.RawIOBase, sock: socket.socket, deadline: float) -> None:
        self.raw, self.sock, self.deadline = raw, sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        limit_socket(self.sock, self.deadline)
        read = self.raw.readinto(buffer)
        if read is None:  # a blocking socket's SO_RCVTIMEO ran out (SocketIO answers EAGAIN with None)
            raise TimeoutError("the call's deadline passed")
        return read

    def close(self) -> None:
        self.raw.close()  # lets the socket close once the connection has let go of it too
        super().close()


def seconds_left(deadline: float) -> float:
    """The time left, for a socket timeout; TimeoutError when none is (a timeout of 0 would mean non-blocking)."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("the call's deadline passed")
    return remaining


def limit_socket(sock: socket.socket, deadline: float) -> None:
    """Let the socket's next waits last only the time left: the kernel's timeouts on a blocking
    socket (PinnedHTTPConnection), Python's on one with a timeout (TLS)."""
    left = seconds_left(deadline)
    if sock.gettimeout() is not None:
        sock.settimeout(left)
        return
    # A timeval of zero would mean "wait forever": at least a millisecond.
    seconds, micro = divmod(max(int(left * 1_000_000), 1_000), 1_000_000)
    value = struct.pack("ll", seconds, micro)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)


@functools.cache
def tls_context() -> ssl.SSLContext:
    """One verifying TLS context per process: building one (loading the CA bundle) costs ~30 ms of
    CPU, which would otherwise be paid on every call; at 64 concurrent calls that alone kept a
    worker process busy. certifi's roots, as httpx used, and nothing from the environment
    (SSL_CERT_FILE). SSLContext is safe to share between threads."""
    context = ssl.create_default_context(cafile=certifi.where())
    context.set_alpn_protocols(["http/1.1"])
    return context


# -- helpers ---------------------------------------------------------------------------

def wire_headers(headers: Mapping[str, str], target: Resolution, body: bytes | None, *,
                 keep_alive: bool = False) -> dict[str, str]:
    """The headers one hop sends: the connection's own replace any configured header of the same name."""
    own = {"Host": host_header(target), "Accept-Encoding": "identity",
           "Connection": "keep-alive" if keep_alive else "close"}
    if body is not None:
        own["Content-Length"] = str(len(body))
    taken = {name.lower() for name in own}
    configured = {k: v for k, v in headers.items() if k.lower() not in taken}
    if body is not None and not any(k.lower() == "content-type" for k in configured):
        configured["Content-Type"] = "application/json"
    return {**own, **configured}


def request_target(url: str) -> str:
    """The path and query to put on the request line, escaped as httpx escaped them."""
    parts = urlsplit(url)
    path = quote(parts.path or "/", safe=PATH_SAFE)
    return f"{path}?{quote(parts.query, safe=QUERY_SAFE)}" if parts.query else path


def describe(exc: BaseException) -> str:
    """An exception as message text: some of http.client's say little without their class name."""
    text, name = str(exc).strip(), type(exc).__name__
    return text if text.startswith(name) else f"{name}: {text}" if text else name


def request_body(value: Any) -> bytes:
    """The JSON a request sends: compact UTF-8, and no NaN or infinity (JSON has none)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


def query_params(arguments: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Arguments as query parameters: lists repeat, objects travel as JSON, None is omitted."""
    params: list[tuple[str, str]] = []
    for name, value in arguments.items():
        for item in value if isinstance(value, list) else [value]:
            if item is None:
                continue
            if isinstance(item, bool):
                params.append((name, "true" if item else "false"))
            elif isinstance(item, (dict, list)):
                params.append((name, json.dumps(item, separators=(",", ":"))))
            else:
                params.append((name, str(item)))
    return params


def with_query(url: str, params: list[tuple[str, str]]) -> str:
    """Append parameters to the URL's own query."""
    if not params:
        return url
    parts = urlsplit(url)
    query = "&".join(filter(None, [parts.query, urlencode(params)]))
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))


def parse_body(raw: bytes, headers: http.client.HTTPMessage) -> Any:
    if not raw:
        return None
    text = raw.decode(body_charset(headers), errors="replace")
    if "json" in headers.get("content-type", "") or text.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


def body_charset(headers: http.client.HTTPMessage) -> str:
    """The response's charset if Python knows it, else UTF-8 (JSON's own)."""
    name = headers.get_content_charset() or "utf-8"
    try:
        return codecs.lookup(name).name
    except LookupError:
        return "utf-8"


def retry_after_seconds(value: str | None, *, now: datetime | None = None) -> float | None:
    """Retry-After as seconds: either delta-seconds or an HTTP-date (the http executor's and the LLM planner's)."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        # "inf", "nan" and "1e400" parse as floats but say nothing (and no JSON can carry them): ignored.
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, round((when - (now or datetime.now(UTC))).total_seconds(), 3))


def origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


def host_header(target: Resolution) -> str:
    host = target.host if target.host.isascii() else target.host.encode("idna").decode("ascii")
    host = f"[{host}]" if ":" in host else host
    default = 443 if target.scheme == "https" else 80
    return host if target.port == default else f"{host}:{target.port}"
