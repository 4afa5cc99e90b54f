"""The stdio bridge: an MCP server on stdin/stdout that relays every message to the gateway.

For MCP clients that only start stdio servers (Claude Desktop's and Cursor's command entries):

    AGENTOPS_MCP_TOKEN=aog_... agentops-mcp-stdio --url http://127.0.0.1:8000/mcp/

It holds no MCP logic of its own: each JSON-RPC message read from stdin goes to the gateway over
streamable HTTP (the official SDK's client transport, with the agent's token), and each message
the gateway sends (results, errors, progress, tools/list_changed) is written to stdout. So the
session, its run, the approvals it waits on and every refusal are the gateway's, exactly as for
an HTTP client; an HTTP failure (a refused token, a lost session) reaches the client as the
JSON-RPC error the transport makes of it. The token comes from the environment, not the command
line, so it never shows in a process list. No Django: it runs on the agent's machine with only
the mcp SDK installed.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys

import anyio
import httpx2
import mcp_types as types
from mcp.client.streamable_http import streamable_http_client
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

log = logging.getLogger("agentops.mcp_stdio")

TOKEN_VARIABLE = "AGENTOPS_MCP_TOKEN"


async def relay(url: str, token: str, *, stdin=None, stdout=None) -> None:
    """Relay until the client closes stdin (or the gateway's stream ends)."""
    # No read timeout: a call held for an approval answers when the operator decides.
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                              timeout=httpx2.Timeout(30.0, read=None))
    async with http, stdio_server(stdin, stdout) as (client_read, client_write), \
            streamable_http_client(url, http_client=http) as (gateway_read, gateway_write), \
            anyio.create_task_group() as tasks:
        async def to_gateway() -> None:
            async for message in client_read:
                if isinstance(message, Exception):   # a line that is not JSON-RPC: say so, as a server would
                    error = types.ErrorData(code=types.PARSE_ERROR, message=f"Not a JSON-RPC message: {message}")
                    await client_write.send(SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=None,
                                                                              error=error)))
                    continue
                await gateway_write.send(message)
            tasks.cancel_scope.cancel()   # stdin closed: the client is done (the session is DELETEd)

        async def to_client() -> None:
            async for message in gateway_read:
                if isinstance(message, Exception):
                    log.warning("gateway stream: %s", message)
                    continue
                await client_write.send(message)
            tasks.cancel_scope.cancel()

        tasks.start_soon(to_gateway)
        tasks.start_soon(to_client)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentops-mcp-stdio", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("AGENTOPS_MCP_URL", "http://127.0.0.1:8000/mcp/"),
                        help="the gateway's address (default $AGENTOPS_MCP_URL or http://127.0.0.1:8000/mcp/)")
    args = parser.parse_args(argv)
    token = os.environ.get(TOKEN_VARIABLE, "").strip()
    if not token:
        print(f"Set {TOKEN_VARIABLE} to the agent's token (manage.py create_agent prints one).", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)   # stdout is the protocol's
    anyio.run(relay, args.url, token)
    return 0


if __name__ == "__main__":
    sys.exit(main())
