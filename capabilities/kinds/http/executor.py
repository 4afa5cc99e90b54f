"""Executor for http capabilities (httpx), every hop through the NetGuard.

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
State-changing capabilities send `Idempotency-Key`; every call sends
`traceparent`. Redirects are followed by hand (at most 5) so that each hop is
checked by the guard; secret headers are dropped when a redirect leaves the
origin. The connection goes to the address the guard checked (DNS rebinding),
with the original Host header and TLS server name. Environment proxies are
ignored (`trust_env=False`): a proxy would resolve names itself.

A status URL answers 2xx when the operation committed (the body is its result,
or `{"committed": bool, "result": ...}`), 404 when it did not; anything else
means "cannot tell".
"""
from __future__ import annotations

import email.utils
import functools
import json
import os
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote, urlencode, urljoin, urlsplit, urlunsplit

import httpx

from capabilities.executors.base import BaseExecutor, CapabilityError, traceparent
from capabilities.executors.secrets import has_line_break, is_credential_header
from capabilities.netguard import NetGuard, Resolution, URLRefused
from runs.runtime.capability import CapabilitySpec
from runs.runtime.observation import ErrorCode, Observation, SideEffectStatus, error_code_for_http_status

METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})
MAX_REDIRECTS = 5
DEFAULT_MAX_RESPONSE_BYTES = 10_000_000


@dataclass(frozen=True)
class Answer:
    status: int
    reason: str
    headers: httpx.Headers
    body: Any
    url: str


class HttpExecutor(BaseExecutor):
    def __init__(self, *, guard: NetGuard, environ: Mapping[str, str] | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.guard = guard
        self.environ = os.environ if environ is None else environ

    # -- execute ----------------------------------------------------------------

    def _run(self, spec: CapabilitySpec, arguments: dict, *, idempotency_key: str | None, timeout_s: float,
             trace_id: str, span_id: str) -> Observation:
        config = spec.config
        method = str(config.get("method", "GET")).upper()
        if method not in METHODS:
            raise CapabilityError(ErrorCode.INVALID_ARGUMENTS, f"unsupported HTTP method {method}")
        headers, secret_names = self._headers(config)
        headers["traceparent"] = traceparent(trace_id, span_id)
        if spec.changes_state and idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
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
                timeout_s: float) -> tuple[bool, Any] | None:
        template = spec.config.get("status_url")
        if not template or ("{idempotency_key}" in template and not idempotency_key):
            return None
        url = template.replace("{idempotency_key}", quote(idempotency_key or "", safe=""))
        headers, secret_names = self._headers(spec.config)
        answer = self._send(spec, "GET", url, headers=headers, secret_names=secret_names, json_body=None, timeout_s=timeout_s, allow_redirects=True)
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
        headers = {"Accept": "application/json"}
        headers.update({str(k): str(v) for k, v in (config.get("headers") or {}).items()})
        secret_names = set()
        for header, env_var in (config.get("secret_headers") or {}).items():
            value = self.environ.get(env_var)
            if not value:
                # Name the variable, never a value.
                raise CapabilityError(ErrorCode.PERMISSION_DENIED,
                                      f"secret for header {header} is missing: environment variable {env_var} is not set")
            if has_line_break(value):
                # httpx would quote the value in its error: refuse before anything sees it.
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
        with httpx.Client(follow_redirects=False, trust_env=False, verify=tls_context()) as client:
            for _hop in range(MAX_REDIRECTS + 1):
                try:
                    target = self.guard.check(url)
                except URLRefused as exc:
                    return self.fail(spec, ErrorCode.PERMISSION_DENIED, str(exc), sent=False)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return self.fail(spec, ErrorCode.TIMEOUT, f"no time left before requesting {target.host}")
                request = client.build_request(method, pinned_url(target), json=json_body,
                                               headers={**headers, "Host": host_header(target)},
                                               timeout=httpx.Timeout(remaining),
                                               extensions={"sni_hostname": target.host})
                answer = self._receive(spec, client, request, target, deadline, limit)
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
                    method, json_body = "GET", None
                url = next_url
        return self.fail(spec, ErrorCode.INVALID_ARGUMENTS, f"more than {MAX_REDIRECTS} redirects from {spec.config['url']}",
                         sent=False)

    def _receive(self, spec: CapabilitySpec, client: httpx.Client, request: httpx.Request, target: Resolution,
                 deadline: float, limit: int) -> Answer | Observation:
        host = target.host
        try:
            response = client.send(request, stream=True)
        except (httpx.ConnectTimeout, httpx.PoolTimeout):
            return self.fail(spec, ErrorCode.TIMEOUT, f"connecting to {host} timed out", sent=False)
        except httpx.TimeoutException:
            return self.fail(spec, ErrorCode.TIMEOUT, f"{host} did not answer in time")
        except httpx.ConnectError as exc:
            return self.fail(spec, ErrorCode.CONNECTION_ERROR, f"cannot connect to {host}: {exc}", sent=False)
        except httpx.TransportError as exc:
            # The connection broke after the request went out: the callee may have acted.
            side_effect = SideEffectStatus.UNKNOWN if spec.changes_state else None
            return self.fail(spec, ErrorCode.CONNECTION_ERROR, f"connection to {host} failed: {exc}",
                             side_effect=side_effect)
        try:
            chunks, size = [], 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > limit:
                    side_effect = SideEffectStatus.COMMITTED if spec.changes_state and response.is_success else None
                    return self.fail(spec, ErrorCode.INVALID_ARGUMENTS,
                                     f"response from {host} is larger than {limit} bytes; narrow the request",
                                     side_effect=side_effect, extra={"http_status": response.status_code})
                chunks.append(chunk)
                if time.monotonic() > deadline:
                    raise httpx.ReadTimeout("deadline passed while reading the body")
        except httpx.TimeoutException:
            return self.fail(spec, ErrorCode.TIMEOUT, f"{host} did not finish answering in time")
        except httpx.TransportError as exc:
            side_effect = SideEffectStatus.UNKNOWN if spec.changes_state else None
            return self.fail(spec, ErrorCode.CONNECTION_ERROR, f"connection to {host} broke: {exc}",
                             side_effect=side_effect)
        finally:
            response.close()
        return Answer(status=response.status_code, reason=response.reason_phrase, headers=response.headers,
                      body=parse_body(b"".join(chunks), response), url=target.url)


# -- helpers ---------------------------------------------------------------------------

@functools.cache
def tls_context() -> ssl.SSLContext:
    """One verifying TLS context per process: building one (loading the CA bundle) costs ~30 ms of
    CPU, which httpx.Client() would otherwise pay on every call; at 64 concurrent calls that alone
    kept a worker process busy. The same roots as httpx's own default (certifi, no environment).
    SSLContext is safe to share between threads."""
    return httpx.create_ssl_context(trust_env=False)


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
    """Append parameters to the URL's own query (httpx's params= would replace it)."""
    if not params:
        return url
    parts = urlsplit(url)
    query = "&".join(filter(None, [parts.query, urlencode(params)]))
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))


def parse_body(raw: bytes, response: httpx.Response) -> Any:
    if not raw:
        return None
    text = raw.decode(response.encoding or "utf-8", errors="replace")
    if "json" in response.headers.get("content-type", "") or text.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


def retry_after_seconds(value: str | None, *, now: datetime | None = None) -> float | None:
    """Retry-After as seconds: either delta-seconds or an HTTP-date (the http executor's and the LLM planner's)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, round((when - (now or datetime.now(timezone.utc))).total_seconds(), 3))


def origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


def pinned_url(target: Resolution) -> str:
    """The URL with its host replaced by the checked address, so no second DNS lookup happens."""
    parts = urlsplit(target.url)
    address = f"[{target.address}]" if ":" in target.address else target.address
    return urlunsplit((parts.scheme, f"{address}:{target.port}", parts.path, parts.query, ""))


def host_header(target: Resolution) -> str:
    host = f"[{target.host}]" if ":" in target.host else target.host
    default = 443 if target.scheme == "https" else 80
    return host if target.port == default else f"{host}:{target.port}"
