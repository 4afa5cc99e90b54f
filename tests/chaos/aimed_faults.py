"""Faults aimed at one moment, shared by tests/runs/test_exactly_once.py and bench/chaos.py.

- a web process (uvicorn, the production ASGI app) to SIGKILL inside an approval POST, held inside
  its transaction by a row lock taken from another connection;
- the ledger's stdio MCP server (ledger_mcp_server.py) registered as the capability `ledger_mcp`,
  so a worker can be SIGKILLed while its call is in flight.
"""
from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LEDGER_MCP_COMMAND = "python -m ledger_mcp_server"


def start_web(env: dict) -> tuple[subprocess.Popen, str]:
    """The web process on a free loopback port: (process, base URL)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "agentops.asgi:application", "--host", "127.0.0.1",
                             "--port", str(port), "--log-level", "warning"], cwd=ROOT,
                            env={**env, "SECURE_SSL_REDIRECT": "false"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, f"http://127.0.0.1:{port}"


def answers(url: str) -> bool:
    import httpx

    try:
        return httpx.get(url, timeout=5).status_code in (200, 503)
    except httpx.HTTPError:
        return False


def post_quietly(url: str, key: str, body: dict) -> None:
    """POST with an API token; the server may be killed under it."""
    import httpx

    with contextlib.suppress(httpx.HTTPError):
        httpx.post(url, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30)


class RowLocked:
    """Hold the run's row (PostgreSQL) or the database's write lock (SQLite) from another connection,
    so a decision's transaction stops inside itself until the block ends."""

    def __init__(self, run_id: int):
        self.run_id = run_id

    def __enter__(self):
        from django.db import connection

        settings_dict = connection.settings_dict
        if connection.vendor == "sqlite":
            import sqlite3

            self.holder = sqlite3.connect(settings_dict["NAME"], timeout=30, isolation_level=None)
            self.holder.execute("BEGIN IMMEDIATE")
        else:
            import psycopg

            self.holder = psycopg.connect(host=settings_dict["HOST"] or "127.0.0.1",
                                          port=settings_dict["PORT"] or 5432, user=settings_dict["USER"],
                                          dbname=settings_dict["NAME"])
            self.holder.execute("SELECT 1 FROM runs_run WHERE id = %s FOR UPDATE", [self.run_id])
        return self

    def __exit__(self, *exc) -> None:
        if hasattr(self.holder, "rollback"):
            self.holder.rollback()
        else:
            self.holder.execute("ROLLBACK")
        self.holder.close()


def register_ledger_mcp(user, *, timeout_s: int = 20):
    """The ledger's stdio MCP server and its one tool as the capability `ledger_mcp` (idempotent by key).

    The worker and this process need LEDGER_MCP_COMMAND among AGENTOPS_MCP_STDIO_COMMANDS, and
    PYTHONPATH (tests/chaos) and CHAOS_LEDGER in their environment: the server is given both."""
    from capabilities.kinds.mcp import servers

    server = servers.mcp_server_create(user=user, name="ledger", transport="stdio", command="python",
                                       args=["-m", "ledger_mcp_server"], env_vars=["PYTHONPATH", "CHAOS_LEDGER"])
    return servers.mcp_tools_import(user=user, server_id=server.pk, tools=[{
        "name": "ledger_mcp_write", "capability_name": "ledger_mcp", "side_effect": "write", "idempotent": True,
        "requires_approval": False, "retry_max_attempts": 3, "timeout_s": timeout_s}])
