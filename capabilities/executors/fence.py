"""The fencing token a state-changing call carries to its callee.

A run's lease token rises on every claim (runs/worker/leases.py), so (lease token, attempt) orders
every call ever made for a run. A worker paused past its lease (SIGSTOP, a long GC, a VM
migration) can wake and finish a call after another worker took the run over; a callee that
checks the fence makes that late call harmless:

- a python capability calls `context.fence.still_current()` inside the transaction that
  commits its effect (on the AgentOps database the check locks the run row, so a takeover
  waits for the commit and its lookup sees it);
- an HTTP or MCP callee keeps, per idempotency key, the highest lease token it has seen
  (lookups carry it too) and refuses a write that carries a lower one.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

# The HTTP header and the MCP `_meta` key the fence travels in, beside the idempotency key.
FENCE_HEADER = "AgentOps-Fence"
IDEMPOTENCY_HEADER = "Idempotency-Key"
FENCE_META = "io.agentops/fence"
IDEMPOTENCY_META = "io.agentops/idempotency-key"


@dataclass(frozen=True)
class Fence:
    run_id: int
    lease_token: int
    attempt: int
    # Asks the run's store whether lease_token is still the run's current one.
    check: Callable[[], bool] | None = field(default=None, compare=False, repr=False)

    @property
    def token(self) -> str:
        """`run:lease_token:attempt`, as sent: compare lease tokens as integers, never as text."""
        return f"{self.run_id}:{self.lease_token}:{self.attempt}"

    def still_current(self) -> bool:
        """False once another worker has taken the run over: commit nothing then."""
        return True if self.check is None else bool(self.check())
