"""Executor for MCP tools, through the official `mcp` SDK 2.x client.

config:
    transport   "stdio" | "http"
    command     "python"                       (stdio)
    args        ["-m", "my_server"]            (stdio)
    env         {"LOG_LEVEL": "info"}          (stdio, plain values, merged over a minimal default env)
                or ["API_TOKEN", ...]          (stdio, names of variables passed through from our env)
    secret_env  {"API_TOKEN": "MY_TOKEN_VAR"}  (stdio, variable → env var NAME read at call time)
    url         "https://tools.example.com/mcp" (http, streamable HTTP; checked by the NetGuard)
    headers / secret_headers                    (http, as for the http executor)
    tool        "search"                        the tool to call

Stdio servers are pooled per process (mcp_pool.py): started once, reused by
every call, restarted when they die or time out, stopped at shutdown. Their
stderr goes to a real file whose tail is attached to a failed call (never to
sys.stderr, which a Celery worker replaces with a proxy that has no file
descriptor). A stdio command runs only when it is on the allowlist the server
configures (`StdioPolicy.commands`, from AGENTOPS_MCP_STDIO_COMMANDS), and
every start is reported to `StdioPolicy.on_start` (the audit trail). HTTP sessions are opened
per call, inside a worker thread running its own event loop, because the
caller's thread may already run one (Celery, Playwright).

Classification: `is_error` results are terminal, with the code the text clearly
indicates (not found, permission, validation, conflict, rate limit, timeout...)
and tool_error otherwise (terminal: the tool failed and said nothing we can classify);
protocol errors and broken connections are connection_error (a protocol
"invalid params" error is invalid_arguments); timeouts are timeout.
structured_content is preferred over text content as the output.

For the http transport the SDK's HTTP client gets a transport that checks
every request with the guard and connects to the checked address (DNS
rebinding is pinned, as for the http executor); redirects are not followed.
"""
from __future__ import annotations

import json
import re
import shlex
import sys
import tempfile
import threading
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from capabilities.executors import event_loop
from capabilities.executors.base import BaseExecutor, CapabilityError, traceparent
from capabilities.executors.fence import FENCE_META, IDEMPOTENCY_META, Fence
from capabilities.executors.secrets import has_line_break
from capabilities.kinds.mcp import pool as mcp_pool
from capabilities.netguard import NetGuard, URLRefused, guarded_async_transport
from runtime.capability import CapabilitySpec
from runtime.observation import ErrorCode, Observation, SideEffectStatus
from runtime.storable import storable_dumps, text_storable

# A protocol-level "invalid params" error: the arguments, not the connection.
JSONRPC_INVALID_PARAMS = -32602
# Time the caller waits past the timeout for the worker to report what happened.
REPORT_GRACE_S = 0.25


@dataclass(frozen=True)
class ToolHints:
    """A server's tool annotations: untrusted hints, used only as suggested defaults."""

    read_only_hint: bool | None = None
    destructive_hint: bool | None = None
    idempotent_hint: bool | None = None
    open_world_hint: bool | None = None


@dataclass(frozen=True)
class ToolInfo:
    name: str
    description: str
    input_schema: dict[str, Any]
    annotations: ToolHints = field(default_factory=ToolHints)
    title: str = ""


# -- the session in a worker thread -------------------------------------------------------

@dataclass
class _Progress:
    """Shared between the worker and the caller: how far the call got."""

    connected: bool = False
    sent: bool = False


class _Timeout(Exception):
    def __init__(self, progress: _Progress, stderr: str = "") -> None:
        super().__init__("timeout")
        self.progress = progress
        self.stderr = stderr


class _Failed(Exception):
    def __init__(self, error: BaseException, progress: _Progress, stderr: str = "") -> None:
        super().__init__(str(error))
        self.error = error
        self.progress = progress
        self.stderr = stderr


@dataclass(frozen=True)
class StdioPolicy:
    """What the server allows of stdio MCP: the command allowlist and who hears of each start.

    An entry without spaces allows that program with any arguments; an entry
    with spaces allows exactly that command line. Empty: no stdio server runs.
    """

    commands: tuple[str, ...] = ()
    on_start: Callable[[Mapping[str, Any], str], None] | None = None   # (config, purpose)

    def refusal(self, command: str, args: list[str]) -> str:
        line = shlex.join([command, *args])
        for entry in self.commands:
            entry = entry.strip()
            if not entry:
                continue
            if " " in entry:
                if shlex.split(entry) == [command, *args]:
                    return ""
            elif entry == command:
                return ""
        if not self.commands:
            return (f"stdio MCP servers are switched off on this server: the command {line!r} would need "
                    "AGENTOPS_MCP_STDIO_COMMANDS to allow it")
        return f"the stdio command {line!r} is not allowed by AGENTOPS_MCP_STDIO_COMMANDS"


def run_session(config: Mapping[str, Any], work: Callable[[Any, _Progress], Awaitable[Any]], timeout_s: float, *,
                guard: NetGuard | None = None, environ: Mapping[str, str] | None = None,
                stdio: StdioPolicy | None = None, pooled: bool = True,
                purpose: str = "call", resend_safe: bool = False) -> tuple[Any, _Progress]:
    """Open (or, for stdio, reuse) a client session, run `work(client, progress)` and return its result.

    Raises _Timeout when it does not finish in time, _Failed with the
    exception the session raised (ExceptionGroups unwrapped), both carrying
    how far the call got and the stdio server's stderr tail. `resend_safe`: the
    call changes nothing, so when a reused stdio session turns out dead it is
    sent once more on a fresh one instead of failing.
    """
    server = _server(config, guard=guard, environ=environ, timeout_s=timeout_s, stdio=stdio or StdioPolicy())
    progress = _Progress()
    on_start = None
    if stdio is not None and stdio.on_start is not None:
        on_start = lambda: stdio.on_start(config, purpose)  # noqa: E731
    if not isinstance(server, _HttpTarget) and pooled:
        return _run_pooled(server, work, timeout_s, progress, on_start, resend_safe=resend_safe), progress
    errlog = None
    if not isinstance(server, _HttpTarget):
        from mcp.client.stdio import stdio_client

        if on_start is not None:
            on_start()
        errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115 - the server's stderr
        server = stdio_client(server, errlog=errlog)
    try:
        return _run_once(server, work, timeout_s, progress), progress
    except (_Timeout, _Failed) as exc:
        exc.stderr = _tail(errlog)
        raise
    finally:
        if errlog is not None:
            threading.Timer(CLOSE_ERRLOG_AFTER_S, errlog.close).start()


CLOSE_ERRLOG_AFTER_S = 10.0   # the server may still be exiting (and writing) after we stopped waiting


def _tail(errlog: Any) -> str:
    if errlog is None:
        return ""
    try:
        errlog.flush()
        errlog.seek(0)
        return errlog.read()[-mcp_pool.STDERR_TAIL_CHARS:].strip()
    except (OSError, ValueError):
        return ""


def _run_pooled(params: Any, work: Callable[[Any, _Progress], Awaitable[Any]], timeout_s: float,
                progress: _Progress, on_start: Callable[[], None] | None, *, resend_safe: bool) -> Any:
    import time

    pool = mcp_pool.pool()
    pool.truncate_logs()
    deadline = time.monotonic() + timeout_s

    def sent() -> None:
        progress.connected = True

    def once(seconds: float) -> Any:
        return pool.run(params, lambda client: work(client, progress), seconds, on_start=on_start, mark_sent=sent)

    try:
        try:
            return once(timeout_s)
        except mcp_pool.SessionFailed as exc:
            left = deadline - time.monotonic()
            if not (exc.reused and resend_safe and left > 0.5):
                raise
            # The server of a reused session died since its last call: restart it and ask again.
            progress.sent = False
            return once(left)
    except mcp_pool.SessionTimeout as exc:
        raise _Timeout(progress, exc.stderr) from None
    except mcp_pool.SessionFailed as exc:
        raise _Failed(exc.error, progress, exc.stderr) from None
    except Exception as exc:  # an error answer from the server (the session stays)
        raise _Failed(_leaf(exc), progress) from None


def _run_once(server: Any, work: Callable[[Any, _Progress], Awaitable[Any]], timeout_s: float,
              progress: _Progress) -> Any:
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def report(key: str, value: Any) -> None:
        if not done.is_set():
            outcome[key] = value
            done.set()

    async def main() -> None:
        import anyio
        from mcp import Client

        try:
            with anyio.fail_after(timeout_s):
                async with AsyncExitStack() as stack:
                    target = server
                    if isinstance(server, _HttpTarget):
                        target = await server.enter(stack)
                    # "legacy": the initialize handshake every deployed server speaks.
                    client = await stack.enter_async_context(Client(target, mode="legacy"))
                    progress.connected = True
                    # Report before the session closes: closing a stdio server can take seconds.
                    report("result", await work(client, progress))
        except TimeoutError:
            report("timeout", True)
        except BaseException as exc:
            report("error", _leaf(exc))

    def thread_main() -> None:
        try:
            event_loop.run(main())
        except BaseException as exc:
            report("error", _leaf(exc))
        finally:
            report("error", RuntimeError("the MCP session ended without a result"))

    threading.Thread(target=thread_main, name="mcp-call", daemon=True).start()
    if not done.wait(timeout_s + REPORT_GRACE_S) or "timeout" in outcome:
        raise _Timeout(progress)
    if "error" in outcome:
        if isinstance(outcome["error"], CapabilityError):
            raise outcome["error"]
        raise _Failed(outcome["error"], progress)
    return outcome["result"]


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _server(config: Mapping[str, Any], *, guard: NetGuard | None, environ: Mapping[str, str] | None,
            timeout_s: float, stdio: StdioPolicy) -> Any:
    import os

    environ = os.environ if environ is None else environ
    transport = config.get("transport", "stdio")
    if transport == "stdio":
        from mcp import StdioServerParameters

        if not config.get("command"):
            raise CapabilityError(ErrorCode.INVALID_ARGUMENTS, "MCP stdio config needs a command")
        refusal = stdio.refusal(str(config["command"]), [str(a) for a in config.get("args") or []])
        if refusal:
            raise CapabilityError(ErrorCode.PERMISSION_DENIED, refusal)
        env_config = config.get("env") or {}
        if isinstance(env_config, list):
            # A list names variables to pass through from our environment (values never stored).
            env = _secrets({name: name for name in env_config}, environ, "environment variable")
        else:
            env = {str(k): str(v) for k, v in env_config.items()}
        env.update(_secrets(config.get("secret_env"), environ, "environment variable"))
        command = sys.executable if config["command"] in ("python", "python3") else config["command"]
        return StdioServerParameters(command=command, args=[str(a) for a in config.get("args") or []],
                                     env=env or None, cwd=config.get("cwd"))
    if transport == "http":
        url = config.get("url") or ""
        if guard is None:
            raise CapabilityError(ErrorCode.PERMISSION_DENIED, "MCP over HTTP needs a network guard")
        try:
            guard.check(url)
        except URLRefused as exc:
            raise CapabilityError(ErrorCode.PERMISSION_DENIED, str(exc)) from None
        headers = {str(k): str(v) for k, v in (config.get("headers") or {}).items()}
        headers.update(_secrets(config.get("secret_headers"), environ, "header"))
        return _HttpTarget(url=url, headers=headers, timeout_s=timeout_s, guard=guard)
    raise CapabilityError(ErrorCode.INVALID_ARGUMENTS, f"unknown MCP transport {transport!r}")


@dataclass(frozen=True)
class _HttpTarget:
    url: str
    headers: dict[str, str] = field(repr=False)  # may hold secrets
    timeout_s: float = 10.0
    guard: NetGuard | None = field(default=None, repr=False)

    async def enter(self, stack: AsyncExitStack) -> Any:
        """The streamable-HTTP transport, with an HTTP client closed when the session ends."""
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        # Every request (the SDK makes several) is checked and sent to the checked address.
        http_client = await stack.enter_async_context(httpx2.AsyncClient(
            headers=self.headers, timeout=self.timeout_s, follow_redirects=False, trust_env=False,
            transport=guarded_async_transport(self.guard) if self.guard is not None else None))
        return streamable_http_client(self.url, http_client=http_client)


def _secrets(mapping: Mapping[str, str] | None, environ: Mapping[str, str], what: str) -> dict[str, str]:
    values = {}
    for name, env_var in (mapping or {}).items():
        value = environ.get(env_var)
        if not value:
            raise CapabilityError(ErrorCode.PERMISSION_DENIED,
                                  f"secret for {what} {name} is missing: environment variable {env_var} is not set")
        if what == "header" and has_line_break(value):
            raise CapabilityError(ErrorCode.PERMISSION_DENIED, f"secret for header {name} is unusable: "
                                                               f"environment variable {env_var} contains a line break")
        values[name] = value
    return values


# -- the import flow ------------------------------------------------------------------------

def list_tools(config: Mapping[str, Any], timeout_s: float = 10.0, *, guard: NetGuard | None = None,
               environ: Mapping[str, str] | None = None, stdio: StdioPolicy | None = None) -> list[ToolInfo]:
    """The server's tools, for the import form. Raises CapabilityError (timeout, connection_error...)."""

    async def work(client: Any, _progress: _Progress) -> list[ToolInfo]:
        tools, cursor = [], None
        for _page in range(100):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return [_tool_info(tool) for tool in tools]

    try:
        # Not pooled: listing happens in the web process, which should not keep servers running.
        return run_session(config, work, timeout_s, guard=guard, environ=environ, stdio=stdio, pooled=False,
                           purpose="list_tools")[0]
    except _Timeout as exc:
        raise CapabilityError(ErrorCode.TIMEOUT, f"the MCP server did not list its tools within {timeout_s:g}s"
                              + _stderr_note(exc.stderr)) from None
    except _Failed as exc:
        raise CapabilityError(ErrorCode.CONNECTION_ERROR,
                              f"cannot list the MCP server's tools: {_describe(exc.error)}"
                              + _stderr_note(exc.stderr)) from None


def _stderr_note(stderr: str) -> str:
    return f"; server stderr (last lines): {stderr}" if stderr else ""


def _tool_info(tool: Any) -> ToolInfo:
    """A tool as the server described it; its text kept as the records can hold it (runtime.storable)."""
    hints = tool.annotations
    return ToolInfo(
        name=tool.name,
        description=text_storable(tool.description or ""),
        input_schema=json.loads(storable_dumps(dict(tool.input_schema or {"type": "object"}))),
        annotations=ToolHints(
            read_only_hint=getattr(hints, "read_only_hint", None),
            destructive_hint=getattr(hints, "destructive_hint", None),
            idempotent_hint=getattr(hints, "idempotent_hint", None),
            open_world_hint=getattr(hints, "open_world_hint", None),
        ),
        title=text_storable(getattr(tool, "title", None) or getattr(hints, "title", None) or ""),
    )


def suggested_policy(tool: ToolInfo) -> dict[str, Any]:
    """Default policy fields for an imported tool; the operator reviews them.

    Annotations come from the server and are untrusted, so they only pick the
    defaults, and missing hints take MCP's own conservative defaults
    (not read-only, destructive): a write that needs approval.
    """
    hints = tool.annotations
    notes = []
    if hints.read_only_hint:
        side_effect, requires_approval = "none", False
        notes.append("readOnlyHint: no side effect")
    else:
        side_effect = "external" if hints.open_world_hint else "write"
        requires_approval = hints.destructive_hint is not False
        if hints.destructive_hint:
            notes.append("destructiveHint: write that requires approval")
        elif hints.destructive_hint is None:
            notes.append("no readOnlyHint/destructiveHint: assumed a write that requires approval")
        else:
            notes.append("destructiveHint false: additive write, no approval by default")
        if hints.open_world_hint:
            notes.append("openWorldHint: reaches outside systems")
    idempotent = bool(hints.idempotent_hint or hints.read_only_hint)
    if hints.idempotent_hint:
        notes.append("idempotentHint: repeated calls are harmless")
    return {
        "name": tool.name,
        "description": tool.description,
        "schema": tool.input_schema,
        "side_effect": side_effect,
        "requires_approval": requires_approval,
        "idempotent": idempotent,
        # Whether idempotent came from idempotentHint itself or only from readOnlyHint.
        "idempotent_hint": bool(hints.idempotent_hint),
        "notes": notes,
    }


# -- the executor ----------------------------------------------------------------------------

_TEXT_CODES = [
    (re.compile(r"unknown tool|not found|no such|does not exist"), ErrorCode.NOT_FOUND),
    (re.compile(r"permission|forbidden|unauthori[sz]ed|access denied|not allowed"), ErrorCode.PERMISSION_DENIED),
    (re.compile(r"rate.?limit|too many requests|throttl"), ErrorCode.RATE_LIMITED),
    (re.compile(r"timed out|timeout"), ErrorCode.TIMEOUT),
    (re.compile(r"conflict|already exists"), ErrorCode.CONFLICT),
    (re.compile(r"temporarily unavailable|service unavailable|try again later"), ErrorCode.SERVER_ERROR),
    (re.compile(r"validation error|invalid|required|must be"), ErrorCode.INVALID_ARGUMENTS),
]


def code_for_error_text(text: str) -> ErrorCode:
    lowered = text.lower()
    for pattern, code in _TEXT_CODES:
        if pattern.search(lowered):
            return code
    # Text that matches nothing is not evidence the arguments were wrong: say only what is known.
    return ErrorCode.TOOL_ERROR


class McpExecutor(BaseExecutor):
    def __init__(self, *, guard: NetGuard | None = None, environ: Mapping[str, str] | None = None,
                 stdio: StdioPolicy | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.guard = guard
        self.environ = environ
        self.stdio = stdio or StdioPolicy()

    def _run(self, spec: CapabilitySpec, arguments: dict, *, idempotency_key: str | None, timeout_s: float,
             trace_id: str, span_id: str, fence: Fence | None = None) -> Observation:
        tool = spec.config.get("tool") or spec.name
        meta = {"traceparent": traceparent(trace_id, span_id)}
        if idempotency_key and spec.changes_state:
            meta[IDEMPOTENCY_META] = idempotency_key
        if fence is not None and spec.changes_state:
            meta[FENCE_META] = fence.token

        async def work(client: Any, progress: _Progress) -> Any:
            progress.sent = True
            return await client.call_tool(tool, arguments, meta=meta)

        try:
            result, _ = run_session(spec.config, work, timeout_s, guard=self.guard, environ=self.environ,
                                    stdio=self.stdio, resend_safe=not spec.changes_state)
        except _Timeout as exc:
            where = "answering" if exc.progress.sent else "starting"
            return self.fail(spec, ErrorCode.TIMEOUT, f"MCP tool {tool} timed out {where} after {timeout_s:g}s"
                             + _stderr_note(exc.stderr), sent=exc.progress.sent)
        except _Failed as exc:
            return self._failure_for(spec, tool, exc.error, sent=exc.progress.sent, stderr=exc.stderr)
        return self._observe(spec, tool, result)

    def _observe(self, spec: CapabilitySpec, tool: str, result: Any) -> Observation:
        output = tool_output(result)
        if getattr(result, "is_error", False):
            text = output if isinstance(output, str) else json.dumps(output)
            return self.fail(spec, code_for_error_text(text), f"MCP tool {tool} reported an error: {text[:500]}",
                             side_effect=SideEffectStatus.NOT_COMMITTED)
        return self.ok(spec, output)

    def _failure_for(self, spec: CapabilitySpec, tool: str, exc: BaseException, *, sent: bool,
                     stderr: str = "") -> Observation:
        from mcp.shared.exceptions import MCPError

        if isinstance(exc, MCPError) and exc.code == JSONRPC_INVALID_PARAMS:
            return self.fail(spec, ErrorCode.INVALID_ARGUMENTS, f"MCP tool {tool}: {exc.message}")
        # The connection or the protocol failed; if the call had gone out, we cannot know what it did.
        return self.fail(spec, ErrorCode.CONNECTION_ERROR, f"MCP tool {tool}: {_describe(exc)}" + _stderr_note(stderr),
                         side_effect=SideEffectStatus.UNKNOWN if spec.changes_state and sent else None)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def tool_output(result: Any) -> Any:
    """structured_content if present, else the text (JSON-decoded when it is JSON), else the blocks."""
    if getattr(result, "structured_content", None) is not None:
        return result.structured_content
    blocks = list(getattr(result, "content", None) or [])
    texts = [block.text for block in blocks if getattr(block, "type", "") == "text"]
    if blocks and len(texts) == len(blocks):
        text = "\n".join(texts)
        try:
            parsed = json.loads(text)
        except ValueError:
            return text
        return parsed if isinstance(parsed, (dict, list)) else text
    if not blocks:
        return None
    return [block.model_dump(mode="json", exclude_none=True) for block in blocks]


__all__ = ["McpExecutor", "StdioPolicy", "ToolHints", "ToolInfo", "list_tools", "suggested_policy", "tool_output",
           "code_for_error_text", "run_session"]
