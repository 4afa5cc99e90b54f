"""The MCP executor against a real MCP server started over stdio."""
from __future__ import annotations

import asyncio
import sys
import threading
import time
from pathlib import Path

import pytest

from capabilities.executors.base import CapabilityError, FileOutputStore
from capabilities.kinds.mcp.executor import (
    McpExecutor,
    StdioPolicy,
    ToolHints,
    ToolInfo,
    code_for_error_text,
    list_tools,
    suggested_policy,
)
from runtime.capability import CapabilitySpec, Kind, SideEffect
from runtime.observation import ErrorCode, SideEffectStatus, Status

SERVER = str(Path(__file__).with_name("mcp_demo_server.py"))
STDIO = {"transport": "stdio", "command": sys.executable, "args": [SERVER]}
ALLOW_PYTHON = StdioPolicy(commands=(sys.executable, "/nonexistent/mcp-server"))

pytestmark = pytest.mark.slow


def mcp_spec(tool, *, side_effect=SideEffect.NONE, timeout_s=15.0, **config):
    return CapabilitySpec(name=f"mcp_{tool}", kind=Kind.MCP, side_effect=side_effect, timeout_s=timeout_s,
                          config={**STDIO, "tool": tool, **config})


@pytest.fixture
def executor(tmp_path):
    return McpExecutor(environ={"DEMO_SECRET_VAR": "abcdef"}, output_store=FileOutputStore(tmp_path),
                       stdio=ALLOW_PYTHON)


def run(executor, spec, arguments, *, key=None, timeout_s=None):
    return executor.execute(spec, arguments, idempotency_key=key, timeout_s=timeout_s or spec.timeout_s,
                            trace_id="0af7651916cd43dd8448eb211c80319c", span_id="b7ad6b7169203331")


@pytest.fixture(scope="module")
def tools():
    return {tool.name: tool for tool in list_tools(STDIO, timeout_s=20, stdio=ALLOW_PYTHON)}


class TestImport:
    def test_it_lists_the_server_tools_with_schemas_and_hints(self, tools):
        assert {"add", "lookup", "delete_item", "explode", "slow", "whoami"} <= set(tools)
        add = tools["add"]
        assert add.description == "Add two integers."
        assert add.input_schema["required"] == ["a", "b"]
        assert add.annotations == ToolHints(read_only_hint=True, idempotent_hint=True)
        assert tools["delete_item"].annotations.destructive_hint is True

    def test_it_suggests_no_side_effect_for_a_read_only_tool(self, tools):
        policy = suggested_policy(tools["lookup"])
        assert (policy["side_effect"], policy["requires_approval"], policy["idempotent"]) == ("none", False, True)
        assert policy["schema"] == tools["lookup"].input_schema

    def test_it_suggests_an_approved_write_for_a_destructive_tool(self, tools):
        policy = suggested_policy(tools["delete_item"])
        assert (policy["side_effect"], policy["requires_approval"], policy["idempotent"]) == ("write", True, False)

    def test_it_assumes_the_worst_for_a_tool_without_hints(self, tools):
        policy = suggested_policy(tools["explode"])
        assert (policy["side_effect"], policy["requires_approval"]) == ("write", True)
        assert policy["notes"]

    def test_it_marks_idempotent_and_open_world_tools(self):
        tool = ToolInfo(name="t", description="", input_schema={"type": "object"},
                        annotations=ToolHints(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                                              open_world_hint=True))
        policy = suggested_policy(tool)
        assert (policy["side_effect"], policy["requires_approval"], policy["idempotent"]) == ("external", False, True)

    def test_a_tools_text_with_nul_characters_is_kept_as_the_records_can_hold_it(self):
        """PostgreSQL keeps no NUL in text or JSON: an import must not fail on a server's description."""
        import mcp_types as types

        from capabilities.kinds.mcp.executor import _tool_info

        tool = _tool_info(types.Tool(name="t", title="T\x00", description="Adds\x00.", input_schema={
            "type": "object", "properties": {"a": {"type": "string", "description": "x\x00"}}}))
        assert (tool.title, tool.description) == ("T\ufffd", "Adds\ufffd.")
        assert tool.input_schema["properties"]["a"]["description"] == "x\ufffd"

    def test_listing_a_server_that_cannot_start_is_a_connection_error(self):
        with pytest.raises(CapabilityError) as caught:
            list_tools({"transport": "stdio", "command": "/nonexistent/mcp-server"}, timeout_s=5,
                       stdio=StdioPolicy(commands=("/nonexistent/mcp-server",)))
        assert caught.value.code == ErrorCode.CONNECTION_ERROR


class TestCalls:
    def test_it_prefers_structured_content(self, executor):
        observation = run(executor, mcp_spec("add"), {"a": 2, "b": 3})
        assert observation.status == Status.OK
        assert observation.output == {"result": 5}
        assert observation.trace_id == "0af7651916cd43dd8448eb211c80319c"

    def test_it_decodes_json_text_content(self, executor):
        observation = run(executor, mcp_spec("lookup"), {"item_id": "a1"})
        assert observation.output == {"id": "a1", "name": "Laptop"}

    def test_a_tool_error_naming_a_missing_thing_is_not_found(self, executor):
        observation = run(executor, mcp_spec("lookup"), {"item_id": "zz"})
        assert observation.error_code == ErrorCode.NOT_FOUND
        assert observation.status == Status.TERMINAL
        assert "item zz not found" in observation.error_message

    def test_a_plain_tool_error_is_terminal(self, executor):
        observation = run(executor, mcp_spec("explode", side_effect=SideEffect.WRITE), {"reason": "gears"}, key="k")
        assert observation.status == Status.TERMINAL
        assert observation.error_code == ErrorCode.TOOL_ERROR
        assert observation.error_category.value == "tool"
        assert "the widget exploded: gears" in observation.error_message
        assert observation.side_effect == SideEffectStatus.NOT_COMMITTED

    def test_an_unknown_tool_is_not_found(self, executor):
        observation = run(executor, mcp_spec("no_such_tool"), {})
        assert observation.error_code == ErrorCode.NOT_FOUND

    def test_a_destructive_tool_that_answers_has_committed(self, executor):
        observation = run(executor, mcp_spec("delete_item", side_effect=SideEffect.WRITE), {"item_id": "b2"}, key="k")
        assert observation.output == {"result": "deleted b2"}
        assert observation.side_effect == SideEffectStatus.COMMITTED
        assert observation.state_changed

    def test_a_call_past_its_timeout_is_abandoned_with_an_unknown_outcome(self, executor):
        spec = mcp_spec("slow", side_effect=SideEffect.WRITE)
        # Warm the interpreter caches so the server starts well within the budget.
        run(executor, mcp_spec("add"), {"a": 1, "b": 1})
        started = time.monotonic()
        observation = run(executor, spec, {"seconds": 30}, key="k", timeout_s=4)
        assert time.monotonic() - started < 6
        assert observation.error_code == ErrorCode.TIMEOUT
        assert observation.status == Status.RETRYABLE
        assert observation.side_effect == SideEffectStatus.UNKNOWN
        assert "answering" in observation.error_message

    def test_a_server_that_cannot_start_is_a_connection_error_that_never_committed(self, executor):
        spec = mcp_spec("add", side_effect=SideEffect.WRITE, command="/nonexistent/mcp-server", args=[])
        observation = run(executor, spec, {"a": 1, "b": 2}, key="k")
        assert observation.error_code == ErrorCode.CONNECTION_ERROR
        assert observation.status == Status.RETRYABLE
        assert observation.side_effect == SideEffectStatus.NOT_COMMITTED

    def test_it_passes_secret_env_by_variable_name(self, executor):
        spec = mcp_spec("whoami", secret_env={"DEMO_SECRET": "DEMO_SECRET_VAR"})
        assert run(executor, spec, {}).output == {"result": "6"}
        missing = run(executor, mcp_spec("whoami", secret_env={"DEMO_SECRET": "UNSET_VAR"}), {})
        assert missing.error_code == ErrorCode.PERMISSION_DENIED
        assert "UNSET_VAR" in missing.error_message

    def test_it_checks_arguments_against_the_schema_before_calling(self, executor, tools):
        spec = CapabilitySpec(name="mcp_add", kind=Kind.MCP, schema=tools["add"].input_schema,
                              config={**STDIO, "tool": "add"})
        observation = run(executor, spec, {"a": "one"})
        assert observation.error_code == ErrorCode.INVALID_ARGUMENTS

    def test_it_works_while_an_event_loop_runs_in_the_calling_thread(self, executor):
        async def inside_a_loop():
            return run(executor, mcp_spec("add"), {"a": 20, "b": 22})

        # In a thread of its own: Playwright's session loop may already run in this one.
        results = []
        worker = threading.Thread(target=lambda: results.append(asyncio.run(inside_a_loop())))
        worker.start()
        worker.join(timeout=60)
        assert results and results[0].output == {"result": 42}


@pytest.mark.parametrize("text, code", [
    ("Unknown tool: x", ErrorCode.NOT_FOUND),
    ("Permission denied for user", ErrorCode.PERMISSION_DENIED),
    ("Rate limit exceeded", ErrorCode.RATE_LIMITED),
    ("upstream timed out", ErrorCode.TIMEOUT),
    ("ticket already exists", ErrorCode.CONFLICT),
    ("1 validation error for Args", ErrorCode.INVALID_ARGUMENTS),
    ("something odd happened", ErrorCode.TOOL_ERROR),
])
def test_it_reads_the_error_code_from_the_tool_error_text(text, code):
    assert code_for_error_text(text) == code


class TestHttpTransport:
    def test_it_lists_and_calls_tools_over_streamable_http(self, http_mcp_server, tmp_path):
        from capabilities.netguard import NetGuard

        guard = NetGuard(["127.0.0.1"])
        config = {"transport": "http", "url": http_mcp_server}
        names = {tool.name for tool in list_tools(config, timeout_s=10, guard=guard)}
        assert "add" in names
        executor = McpExecutor(guard=guard, output_store=FileOutputStore(tmp_path))
        spec = CapabilitySpec(name="mcp_add", kind=Kind.MCP, config={**config, "tool": "add"})
        assert run(executor, spec, {"a": 1, "b": 2}).output == {"result": 3}

    def test_it_refuses_a_server_off_the_allowlist(self, http_mcp_server, tmp_path):
        from capabilities.netguard import NetGuard

        executor = McpExecutor(guard=NetGuard(["tools.example.com"]), output_store=FileOutputStore(tmp_path))
        spec = CapabilitySpec(name="mcp_add", kind=Kind.MCP,
                              config={"transport": "http", "url": http_mcp_server, "tool": "add"})
        observation = run(executor, spec, {"a": 1, "b": 2})
        assert observation.error_code == ErrorCode.PERMISSION_DENIED
        assert "127.0.0.1" in observation.error_message
