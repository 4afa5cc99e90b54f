"""The executor every capability call goes through (a run's steps, try it, an evaluation run).

The kinds' executors behind one dispatch, given what settings allow (the guard,
the stdio policy, the redactor: `capabilities.egress`), behind the
registry-wide rate limit (`capabilities.ratelimit`).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from capabilities.egress import capability_guard, server_redactor, stdio_policy
from capabilities.executors.dispatch import CapabilityExecutor
from capabilities.outputs import DatabaseOutputStore
from capabilities.ratelimit import RateLimitedExecutor


def capability_executor(*, actor=None, context: Mapping[str, Any] | None = None,
                        registry_version: Any = None) -> RateLimitedExecutor:
    """`actor` and `context` (e.g. the run) go into the audit event of a stdio server start;
    `registry_version` (a worker's slice knows it) lets the server's redactor be reused."""
    return RateLimitedExecutor(CapabilityExecutor(
        guard=capability_guard(), stdio=stdio_policy(actor=actor, context=context),
        output_store=DatabaseOutputStore(), redactor=server_redactor(registry_version)))
