"""Figures for issue 13: stdio MCP calls per session vs pooled, and a catastrophic schema pattern.

    .venv/bin/python bench/mcp_and_patterns.py [--calls 20] [--chars 29]

1. Per-call latency of a stdio MCP tool (the real mcp-server-time from PyPI): a fresh server per call
   (what every call did before the pool) against the per-process pool (what runs do now).
2. Validating {"pattern": "^(a+)+$"} against "a" * N + "!": plain jsonschema (Python's re, before) against
   runtime.schemas (regex with a time limit, now).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from capabilities.kinds.mcp import pool as mcp_pool  # noqa: E402
from capabilities.kinds.mcp.executor import StdioPolicy, run_session  # noqa: E402

CONFIG = {"transport": "stdio", "command": "python", "args": ["-m", "mcp_server_time"]}
POLICY = StdioPolicy(commands=("python -m mcp_server_time",))


async def _call(client, progress):
    return await client.call_tool("get_current_time", {"timezone": "Etc/UTC"})


def _timed(calls: int, *, pooled: bool) -> list[float]:
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        result, _ = run_session(CONFIG, _call, 30.0, stdio=POLICY, pooled=pooled)
        assert not result.is_error
        times.append(time.perf_counter() - started)
    return times


def mcp_figures(calls: int) -> None:
    fresh = _timed(calls, pooled=False)
    pooled = _timed(calls, pooled=True)
    first, rest = pooled[0], pooled[1:]
    print(f"stdio MCP call (mcp-server-time get_current_time), {calls} calls each:")
    print(f"  fresh server per call (before): median {statistics.median(fresh) * 1000:7.1f} ms, "
          f"max {max(fresh) * 1000:7.1f} ms")
    print(f"  pooled session (now):           median {statistics.median(rest) * 1000:7.1f} ms "
          f"(first call, which starts the server: {first * 1000:.1f} ms); servers started: {mcp_pool.pool().starts}")
    mcp_pool.pool().close_all()


def pattern_figures(chars: int) -> None:
    import jsonschema

    from runtime import schemas

    schema = {"type": "object", "properties": {"name": {"type": "string", "pattern": "^(a+)+$"}}}
    argument = {"name": "a" * chars + "!"}
    started = time.perf_counter()
    schemas.errors(schema, argument)
    now = time.perf_counter() - started
    started = time.perf_counter()
    list(jsonschema.Draft202012Validator(schema).iter_errors(argument))
    before = time.perf_counter() - started
    print(f'pattern "^(a+)+$" against {chars} x "a" + "!":')
    print(f"  jsonschema with re (before): {before:8.3f} s")
    print(f"  schemas with regex (now):    {now:8.5f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--chars", type=int, default=29)
    options = parser.parse_args()
    mcp_figures(options.calls)
    pattern_figures(options.chars)
