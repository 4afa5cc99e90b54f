"""The no-op python capability bench/gateway.py calls through the gateway and directly."""
from capabilities.kinds.python.registry import capability


@capability(timeout_s=5)
def bench_noop(i: int) -> dict:
    """Returns its argument: the call itself costs next to nothing."""
    return {"i": i}
