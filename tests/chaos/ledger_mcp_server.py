"""A real stdio MCP server whose one tool writes to the chaos ledger (CHAOS_LEDGER).

Run as `python -m ledger_mcp_server` with tests/chaos on the path. The tool is a well-behaved
callee as docs/operations.md "What a callee must do" describes it: idempotent by the call's
`io.agentops/idempotency-key`, and fenced by `io.agentops/fence`: it keeps the highest lease
token seen per key and refuses a write that carries a lower one (a worker's late call after a
takeover). A `received` line is written when a call arrives, `exec`/`effect` when it lands.
"""
from __future__ import annotations

import os
import time

from chaos_ledger import _append, _lines, _locked
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("agentops-chaos-ledger")


def _meta(ctx: Context) -> dict:
    return dict(ctx.request_context.meta or {})


@server.tool(annotations=ToolAnnotations(idempotent_hint=True, read_only_hint=False, destructive_hint=False))
def ledger_mcp_write(item: str, seconds: float, ctx: Context) -> dict:
    """Write an item to the chaos ledger after `seconds`; the same idempotency key writes once."""
    meta = _meta(ctx)
    key, fence = meta.get("io.agentops/idempotency-key", ""), meta.get("io.agentops/fence", "")
    token = int(fence.split(":")[1]) if fence.count(":") == 2 else 0
    parts = str(meta.get("traceparent", "")).split("-")
    span = parts[2] if len(parts) == 4 else ""   # the attempt's span, to match the trace
    with _locked() as fh:
        _append(fh, {"kind": "received", "capability": "ledger_mcp_write", "key": key, "item": item,
                     "pid": os.getpid(), "parent": os.getppid(), "fence": fence, "at": time.time()})
    time.sleep(seconds)
    with _locked() as fh:
        records = _lines(fh)
        newest = max((r.get("token", 0) for r in records if r.get("key") == key and r["kind"] == "fenced"), default=0)
        if token < newest:
            raise ToolError(f"fenced: lease token {token} is older than {newest} for this key; nothing written")
        _append(fh, {"kind": "fenced", "key": key, "token": token})
        for record in records:
            if record.get("kind") == "effect" and record.get("key") == key:
                return {"receipt": record["receipt"], "item": item, "deduplicated": True}
        receipt = f"r-{os.getpid()}-{time.time_ns()}"
        _append(fh, {"kind": "exec", "capability": "ledger_mcp_write", "key": key, "span": span, "item": item,
                     "pid": os.getpid(), "at": time.time()})
        _append(fh, {"kind": "effect", "capability": "ledger_mcp_write", "key": key, "span": span, "item": item,
                     "receipt": receipt, "at": time.time()})
    return {"receipt": receipt, "item": item}


if __name__ == "__main__":
    server.run("stdio")
