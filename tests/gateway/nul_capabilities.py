"""Capabilities whose answers carry NUL characters, which PostgreSQL keeps in neither JSON nor text."""
from capabilities.kinds.python.registry import capability


@capability(timeout_s=5)
def gw_nul_output(text: str) -> dict:
    """Answers NUL characters in a value and in a key."""
    return {"v": f"{text}\x00b", "k\x00": 1}


@capability(timeout_s=5, retry={"max_attempts": 1})
def gw_nul_error(text: str) -> dict:
    """Fails with a NUL character in its message."""
    raise ValueError(f"bad\x00{text}")
