"""Capabilities the gateway tests register (AGENTOPS_CAPABILITY_MODULES in the worker too)."""
import time

from chaos_ledger import _effect  # tests/chaos: the ledger outside the product where real effects are counted

from capabilities.kinds.python.registry import CallContext, capability


@capability(timeout_s=5)
def gw_echo(text: str) -> dict:
    """Echo the text back (a no-op: the gateway's own overhead is what the bench measures)."""
    return {"echo": text}


@capability(timeout_s=5, retry={"max_attempts": 1})
def gw_flaky(q: str) -> dict:
    """Always fails with a connection error (retryable, but no retry left)."""
    raise ConnectionError("upstream refused the connection")


@capability(timeout_s=5, side_effect="write", requires_approval=True, idempotent=True)
def gw_approved(note: str) -> dict:
    """A write an operator must approve."""
    return {"written": note}


@capability(timeout_s=5, side_effect="write", permission="capabilities.change_capability")
def gw_admin_only(text: str) -> dict:
    """A write needing a permission operators lack: an operator's agent never sees it."""
    return {"admin": text}


@capability(timeout_s=10)
def gw_slow(seconds: float) -> dict:
    """Sleeps, so a call is still in flight when the test makes another."""
    time.sleep(min(seconds, 5))
    return {"slept": seconds}


@capability(timeout_s=30, side_effect="write", idempotent=False, retry={"max_attempts": 1})
def gw_slow_write(item: str, seconds: float, *, context: CallContext) -> dict:
    """A write that is NOT idempotent and takes `seconds`: each execution is one more effect in the ledger."""
    time.sleep(min(seconds, 20))
    return _effect("gw_slow_write", item, context, idempotent=False)
