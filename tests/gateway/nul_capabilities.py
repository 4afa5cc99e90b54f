"""Capabilities whose answers carry what no database keeps as it is: NUL characters (PostgreSQL keeps
none in JSON or text), lone surrogates (no database driver encodes one), NaN and infinities (not JSON)."""
from capabilities.kinds.python.registry import capability


@capability(timeout_s=5)
def gw_nul_output(text: str) -> dict:
    """Answers NUL characters in a value and in a key, and a lone surrogate."""
    return {"v": f"{text}\x00b", "k\x00": 1, "lone": "\ud800"}


@capability(timeout_s=5, retry={"max_attempts": 1})
def gw_nul_error(text: str) -> dict:
    """Fails with a NUL character and a lone surrogate in its message."""
    raise ValueError(f"bad\x00{text}\udfff")


@capability(timeout_s=5)
def gw_nonfinite_output(x: float) -> dict:
    """Answers NaN and infinities beside its argument."""
    return {"x": x, "nan": float("nan"), "inf": [float("inf"), float("-inf")]}
