"""Keeping the checkpoint bounded: history entries carry outputs only while they are small.

The history window is for the repetition rule (signatures and fingerprints, computed
from the full output before it is bounded) and for planners (which read small,
structured outputs). A large output stays in its attempt row; the entry keeps a
reference to that attempt with a preview, its size and hash, as an output stored
by reference does. So the checkpoint costs at most the window times this bound,
whatever the capabilities return.
"""
from __future__ import annotations

import hashlib
import json

from .observation import Observation, OutputRef
from .records import replace

HISTORY_OUTPUT_BYTES = 2048
PREVIEW_CHARS = 500


def bounded_for_history(observation: Observation, attempt_id: str) -> Observation:
    if observation.output is None or observation.output_ref is not None:
        return observation
    text = json.dumps(observation.output, sort_keys=True, default=str)
    data = text.encode()
    if len(data) <= HISTORY_OUTPUT_BYTES:
        return observation
    ref = OutputRef(uri=f"attempt:{attempt_id}", size_bytes=len(data), sha256=hashlib.sha256(data).hexdigest(),
                    preview=text[:PREVIEW_CHARS])
    return replace(observation, output=None, output_ref=ref)
