"""The MCP SDK alone, for bench/gateway.py's floor: the official SDK's server (the same low-level Server
and streamable HTTP session manager the gateway uses) with the same no-op tool and nothing of AgentOps:
no token, no run, no database, no worker. Served by uvicorn: `uvicorn bare_mcp:app` (bench/ on the path)."""
from __future__ import annotations

import json

import mcp_types as types
from gw_bench_capabilities import bench_noop
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager


async def _list_tools(ctx, params) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[types.Tool(name="bench_noop", input_schema={
        "type": "object", "properties": {"i": {"type": "integer"}}, "required": ["i"]})])


async def _call_tool(ctx, params) -> types.CallToolResult:
    output = bench_noop(**params.arguments)
    return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(output))],
                                structured_content=output)


_manager = StreamableHTTPSessionManager(Server("bare", version="1", on_list_tools=_list_tools,
                                               on_call_tool=_call_tool))


async def app(scope, receive, send) -> None:
    if scope["type"] == "lifespan":
        async with _manager.run():
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
    await _manager.handle_request(scope, receive, send)
