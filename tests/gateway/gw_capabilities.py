"""Capabilities the gateway tests register (AGENTOPS_CAPABILITY_MODULES in the worker too)."""
from capabilities.kinds.python.registry import capability


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
    import time

    time.sleep(min(seconds, 5))
    return {"slept": seconds}
