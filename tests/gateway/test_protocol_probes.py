"""The MCP gateway through a real server (uvicorn and a Celery worker): malformed JSON-RPC, hostile
arguments, odd headers. Each is a protocol error, a 4xx or an isError result, never a 500 or an
internal_error run, and the session answers normally afterwards."""
from __future__ import annotations

import json

import httpx
import pytest

ACCEPT = "application/json, text/event-stream"
PROTOCOL = "2025-06-18"
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def stack(gateway_stack):
    return gateway_stack


@pytest.fixture
def token(agent_token, gateway_stack):
    return agent_token("prober", capabilities=("gw_echo",))[1]


def answer(response: httpx.Response) -> dict | None:
    """The JSON-RPC message of a response (JSON or server-sent events)."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        for line in response.text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                message = json.loads(line[5:])
                if "result" in message or "error" in message:
                    return message
        return None
    return response.json() if response.content else None


class Session:
    def __init__(self, url: str, token: str):
        self.url = url
        self.http = httpx.Client(headers={"Authorization": f"Bearer {token}", "Accept": ACCEPT}, timeout=60)
        init = self.http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}}})
        assert init.status_code == 200, init.text
        self.headers = {"Mcp-Session-Id": init.headers["mcp-session-id"], "Mcp-Protocol-Version": PROTOCOL}
        self.http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=self.headers)
        self.next_id = 10

    def post(self, content: bytes | str, headers: dict | None = None) -> httpx.Response:
        return self.http.post(self.url, content=content, headers={"Content-Type": "application/json",
                                                                   **self.headers, **(headers or {})})

    def call(self, name: str, arguments) -> dict:
        self.next_id += 1
        body = json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call",
                           "params": {"name": name, "arguments": arguments}})
        response = self.post(body)
        assert response.status_code == 200, response.text
        return answer(response)

    def still_works(self) -> None:
        message = self.call("gw_echo", {"text": "still here"})
        assert message["result"]["structuredContent"]["echo"] == "still here", message


def call_body(params: str) -> str:
    return '{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": ' + params + "}"


RAW_BODIES = {
    "no_jsonrpc": '{"id": 2, "method": "tools/list"}',
    "jsonrpc_wrong": '{"jsonrpc": "1.0", "id": 2, "method": "tools/list"}',
    "id_float": '{"jsonrpc": "2.0", "id": 2.5, "method": "tools/list"}',
    "id_object": '{"jsonrpc": "2.0", "id": {}, "method": "tools/list"}',
    "id_null": '{"jsonrpc": "2.0", "id": null, "method": "tools/list"}',
    "id_huge": '{"jsonrpc": "2.0", "id": %s, "method": "tools/list"}' % ("9" * 400),
    "id_past_64_bits": '{"jsonrpc": "2.0", "id": ' + str(2**70) + ', "method": "tools/list"}',
    "id_past_str_digits": '{"jsonrpc": "2.0", "id": %s, "method": "tools/list"}' % ("9" * 5000),
    "id_nul": '{"jsonrpc": "2.0", "id": "a\\u0000", "method": "tools/list"}',
    "id_surrogate": '{"jsonrpc": "2.0", "id": "a\\ud800", "method": "tools/list"}',
    "id_huge_string": '{"jsonrpc": "2.0", "id": "%s", "method": "tools/list"}' % ("x" * 500_000),
    "params_list": '{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": ["gw_echo", {}]}',
    "params_string": '{"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": "x"}',
    "method_int": '{"jsonrpc": "2.0", "id": 2, "method": 5}',
    "method_null": '{"jsonrpc": "2.0", "id": 2, "method": null}',
    "method_nul": '{"jsonrpc": "2.0", "id": 2, "method": "tools/list\\u0000"}',
    "method_unknown": '{"jsonrpc": "2.0", "id": 2, "method": "nope/nope"}',
    "top_string": '"hello"',
    "top_number": "12",
    "top_null": "null",
    "empty_batch": "[]",
    "deep": "[" * 100_000 + "]" * 100_000,
    "deep_object": '{"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": %s}' % ('{"a":' * 5000 + "1" + "}" * 5000),
    "nan_id": '{"jsonrpc": "2.0", "id": NaN, "method": "tools/list"}',
    "not_utf8": b'{"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"x": "\xff\xfe"}}',
    "bom": "\ufeff" + '{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}',
    "arguments_list": call_body('{"name": "gw_echo", "arguments": ["x"]}'),
    "arguments_string": call_body('{"name": "gw_echo", "arguments": "x"}'),
    "arguments_null": call_body('{"name": "gw_echo", "arguments": null}'),
    "arguments_deep": call_body('{"name": "gw_echo", "arguments": {"text": %s}}' % ("[" * 3000 + "]" * 3000)),
    "arguments_deep_dicts": call_body('{"name": "gw_echo", "arguments": {"text": "x", "o": %s}}'
                                      % ('{"a":' * 3000 + "1" + "}" * 3000)),
    "arguments_huge": call_body('{"name": "gw_echo", "arguments": {"text": "%s"}}' % ("x" * 900_000)),
    "arguments_nul": call_body('{"name": "gw_echo", "arguments": {"text": "a\\u0000b"}}'),
    "arguments_nul_key": call_body('{"name": "gw_echo", "arguments": {"text": "a", "k\\u0000": 1}}'),
    "arguments_surrogate": call_body('{"name": "gw_echo", "arguments": {"text": "a\\udc00b"}}'),
    "arguments_nan": call_body('{"name": "gw_echo", "arguments": {"text": "a", "n": NaN}}'),
    "arguments_infinity": call_body('{"name": "gw_echo", "arguments": {"text": "a", "n": -Infinity}}'),
    "arguments_1e999": call_body('{"name": "gw_echo", "arguments": {"text": "a", "n": 1e999}}'),
    "arguments_bigint": call_body('{"name": "gw_echo", "arguments": {"text": "a", "n": %s}}' % ("9" * 400)),
    "arguments_text_int": call_body('{"name": "gw_echo", "arguments": {"text": ' + str(2**70) + "}}"),
    "name_nul": call_body('{"name": "gw_echo\\u0000", "arguments": {"text": "a"}}'),
    "name_surrogate": call_body('{"name": "gw_\\ud800echo", "arguments": {"text": "a"}}'),
    "name_long": call_body('{"name": "%s", "arguments": {"text": "a"}}' % ("n" * 10_000)),
    "name_int": call_body('{"name": 5, "arguments": {"text": "a"}}'),
    "name_missing": call_body('{"arguments": {"text": "a"}}'),
    "meta_string": call_body('{"name": "gw_echo", "arguments": {"text": "a"}, "_meta": "x"}'),
    "meta_list": call_body('{"name": "gw_echo", "arguments": {"text": "a"}, "_meta": [1]}'),
    "meta_progress_token_object": call_body('{"name": "gw_echo", "arguments": {"text": "a"}, '
                                            '"_meta": {"progressToken": {"a": 1}}}'),
    "meta_progress_nul": call_body('{"name": "gw_echo", "arguments": {"text": "a"}, '
                                   '"_meta": {"progressToken": "p\\u0000"}}'),
    "list_cursor_nul": '{"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"cursor": "\\u0000"}}',
    "list_cursor_int": '{"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"cursor": 5}}',
    "reinitialize": '{"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {"protocolVersion": "'
                    + PROTOCOL + '", "capabilities": {}, "clientInfo": {"name": "again\\u0000", "version": "0"}}}',
    "ping_nul_meta": '{"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {"_meta": {"x": "\\u0000"}}}',
    "response_from_client": '{"jsonrpc": "2.0", "id": 99, "result": {"x": "\\u0000"}}',
    "error_from_client": '{"jsonrpc": "2.0", "id": 99, "error": {"code": "x", "message": 5}}',
    "notification_cancel_odd": '{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": {}}}',
}


def test_hostile_json_rpc_is_refused_and_the_session_keeps_working(stack, token):
    from runs.models import Run

    session = Session(stack.mcp, token)
    statuses = {}
    for name, body in RAW_BODIES.items():
        response = session.post(body)
        statuses[name] = response.status_code
        assert response.status_code < 500, (name, response.status_code, response.text[:500])
        message = answer(response) if response.status_code == 200 else None
        if message is not None and "error" in message:
            assert message["error"]["code"] != -32603, (name, message)
    session.still_works()
    assert not Run.objects.filter(stop_reason="internal_error").exists()


CALLS = {
    "list": ["x"], "string": "x", "nul": {"text": "a\x00"}, "nul_key": {"text": "a", "\x00": 1},
    "huge_int": {"text": 2**70}, "bool": {"text": True}, "extra": {"text": "a", "other": 1},
    "missing": {}, "long_text": {"text": "x" * 200_000},
}


def test_hostile_arguments_are_an_error_result_and_no_run_fails(stack, token):
    from runs.models import Run

    session = Session(stack.mcp, token)
    for name, arguments in CALLS.items():
        message = session.call("gw_echo", arguments)
        assert "error" in message or message["result"].get("isError"), (name, message)
        if "error" in message:
            assert message["error"]["code"] != -32603, (name, message)
    session.still_works()
    assert not Run.objects.filter(stop_reason="internal_error").exists()


HEADERS = {
    "session_garbage": {"Mcp-Session-Id": "garbage\x7f"},
    "session_huge": {"Mcp-Session-Id": "s" * 60_000},
    "session_latin1": {"Mcp-Session-Id": b"\xe9\xff"},
    "authorization_basic": {"Authorization": "Basic dXNlcjpwYXNz"},
    "authorization_huge": {"Authorization": "Bearer " + "a" * 60_000},
    "authorization_three_words": {"Authorization": "Bearer a b"},
    "authorization_latin1": {"Authorization": b"Bearer aog_\xe9\xff"},
    "authorization_empty": {"Authorization": ""},
    "content_type_text": {"Content-Type": "text/plain"},
    "content_type_form": {"Content-Type": "application/x-www-form-urlencoded"},
    "content_type_charset": {"Content-Type": "application/json; charset=latin-1"},
    "accept_html": {"Accept": "text/html"},
    "accept_json_only": {"Accept": "application/json"},
    "accept_missing": {"Accept": ""},
    "protocol_garbage": {"Mcp-Protocol-Version": "x" * 10_000},
    "protocol_old": {"Mcp-Protocol-Version": "2024-11-05"},
    "last_event_id": {"Last-Event-ID": "1"},
    "last_event_id_garbage": {"Last-Event-ID": b"\xff" * 100},
}


def test_odd_headers_are_a_4xx_and_the_session_keeps_working(stack, token):
    session = Session(stack.mcp, token)
    body = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
    for name, headers in HEADERS.items():
        for method in ("POST", "GET", "DELETE"):
            if method == "DELETE" and name.startswith(("session", "authorization")) is False:
                continue   # a DELETE with the session's own headers ends it
            response = session.http.request(method, stack.mcp, content=body if method == "POST" else None,
                                            headers={"Content-Type": "application/json", **session.headers,
                                                     **headers}, timeout=10) \
                if method != "GET" else _get(session, stack.mcp, headers)
            assert response.status_code < 500, (name, method, response.status_code, response.text[:300])
    session.still_works()


def _get(session, url, headers) -> httpx.Response:
    """A GET opens the session's event stream: read only its status."""
    with session.http.stream("GET", url, headers={**session.headers, **headers}, timeout=10) as response:
        if response.status_code != 200:
            response.read()
        return response


def test_another_agents_session_id_is_refused(stack, token, operator):
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("create_agent", "other", "--owner", operator.username, "--capability", "gw_echo", stdout=out)
    other = out.getvalue().strip().splitlines()[-1]
    mine = Session(stack.mcp, token)
    with httpx.Client(headers={"Authorization": f"Bearer {other}", "Accept": ACCEPT}, timeout=30) as http:
        body = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                           "params": {"name": "gw_echo", "arguments": {"text": "x"}}})
        for method in ("POST", "DELETE"):
            response = http.request(method, stack.mcp, content=body if method == "POST" else None,
                                    headers={"Content-Type": "application/json", **mine.headers})
            assert 400 <= response.status_code < 500, (method, response.status_code, response.text)
    mine.still_works()
