"""What every executor shares: timing, span ids, argument checks, large outputs.

An executor turns one capability call into exactly one `Observation`. Each kind
(python, http, mcp) implements `_run()`; `BaseExecutor.execute()` wraps it so
that nothing a capability does (return, raise, hang, answer too much) escapes as
an exception: classification happens here, at the edge, once.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import time
from abc import ABC, abstractmethod
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from capabilities.executors.fence import Fence
from capabilities.executors.open_calls import OPEN_CALLS
from capabilities.executors.secrets import Redactor, redactor_for, secret_env_names
from runtime.capability import CapabilitySpec
from runtime.ids import random_hex
from runtime.observation import ErrorCode, Observation, OutputRef, SideEffectStatus
from runtime.storable import storable_dumps, text_storable
from runtime.validation import argument_errors

PREVIEW_CHARS = 500


class CapabilityError(Exception):
    """Raised by a capability (or an executor internally) to classify a failure itself.

    `side_effect` defaults to None, meaning "the executor's default for this
    error" (not_committed); a capability that knows better says so.
    """

    def __init__(self, code: ErrorCode | str, message: str = "", *, retry_after_s: float | None = None,
                 side_effect: SideEffectStatus | str | None = None) -> None:
        super().__init__(message or str(code))
        self.code = ErrorCode(code)
        self.message = message or self.code.value
        self.retry_after_s = retry_after_s
        self.side_effect = SideEffectStatus(side_effect) if side_effect is not None else None

    def to_observation(self, default_side_effect: SideEffectStatus = SideEffectStatus.NOT_COMMITTED) -> Observation:
        return Observation.failure(self.code, self.message, retry_after_s=self.retry_after_s,
                                   side_effect=self.side_effect or default_side_effect)


# -- large outputs -----------------------------------------------------------------

class OutputStore(Protocol):
    """Keeps outputs too large to store inline; content-addressed, so writes are idempotent."""

    def save(self, content: bytes, sha256: str) -> str:
        """Store canonical JSON bytes; return the URI to read them back."""
        ...

    def read(self, uri: str) -> Any:
        """Return the parsed JSON stored under `uri`; LookupError if unknown."""
        ...


_URI = re.compile(r"^output:([0-9a-f]{64})$")


class FileOutputStore:
    """Outputs as `<sha256>.json` files in one directory; URIs look like `output:<sha256>`.

    The URI carries only the hash, never a path, so a tampered URI cannot read
    outside the directory.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def save(self, content: bytes, sha256: str) -> str:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{sha256}.json"
        if not path.exists():
            # Write then rename, so a concurrent reader never sees half a file.
            fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
            with os.fdopen(fd, "wb") as handle:
                handle.write(content)
            os.replace(tmp, path)
        return f"output:{sha256}"

    def read(self, uri: str) -> Any:
        match = _URI.match(uri)
        if not match:
            raise LookupError(f"not an output URI: {uri!r}")
        path = self.directory / f"{match.group(1)}.json"
        try:
            return json.loads(path.read_bytes())
        except FileNotFoundError:
            raise LookupError(f"no stored output {uri}") from None


def default_output_store() -> FileOutputStore:
    return FileOutputStore(Path(tempfile.gettempdir()) / "agentops-outputs")


def storable_json(value: Any) -> bytes:
    """An output's canonical JSON, as its size limit and hash count it and the records keep it.

    Values JSON cannot hold (datetimes, decimals, objects) become their str(), each NaN and
    infinite number its name, and each NUL character and lone surrogate U+FFFD (runtime.storable):
    an output must be storable in a JSON column, on either database, whatever a function or a
    service returned.
    """
    return storable_dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode("utf-8")


# -- tracing -----------------------------------------------------------------------

_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_HEX16 = re.compile(r"^[0-9a-f]{16}$")


def new_trace_id() -> str:
    return random_hex(16)


def new_span_id() -> str:
    return random_hex(8)


def traceparent(trace_id: str, span_id: str) -> str:
    """W3C traceparent; ids that are not already W3C-shaped are hashed into shape."""
    trace = trace_id.lower() if _HEX32.match(trace_id.lower()) else hashlib.sha256(trace_id.encode()).hexdigest()[:32]
    span = span_id.lower() if _HEX16.match(span_id.lower()) else hashlib.sha256(span_id.encode()).hexdigest()[:16]
    return f"00-{trace}-{span}-01"


# -- the base class ----------------------------------------------------------------

class BaseExecutor(ABC):
    """Template for one executor kind: subclasses implement `_run` (and maybe `_lookup`).

    `_run` returns an Observation or raises CapabilityError; any other exception
    is an executor bug and becomes a server_error observation rather than
    escaping into the controller.
    """

    def __init__(self, *, output_store: OutputStore | None = None, redactor: Redactor | None = None) -> None:
        self.output_store = output_store or default_output_store()
        # The server's configured secrets (LLM keys, SECRET_KEY...); each call adds its own config's.
        self.redactor = redactor or Redactor()

    # The Executor protocol ----------------------------------------------------

    def execute(self, spec: CapabilitySpec, arguments: dict, *, idempotency_key: str | None = None,
                timeout_s: float | None = None, trace_id: str = "", span_id: str = "",
                attempt: int | None = None, fence: Fence | None = None) -> Observation:
        """`fence`: the fencing token of a run's state-changing call (runs.worker.adapters sets it from
        the run's lease and `attempt`), carried to the callee by every kind."""
        started = time.monotonic()
        trace_id = trace_id or new_trace_id()
        span_id = span_id or new_span_id()
        timeout = spec.timeout_s if timeout_s is None else timeout_s
        try:
            observation = self._refusal(spec, arguments, timeout)
        except RecursionError:
            observation = Observation.failure(ErrorCode.INVALID_ARGUMENTS, "the arguments are nested too deeply")
        if observation is None:
            try:
                observation = self._run(spec, arguments, idempotency_key=idempotency_key, timeout_s=timeout,
                                        trace_id=trace_id, span_id=span_id, fence=fence)
            except CapabilityError as exc:
                observation = exc.to_observation()
            except Exception as exc:  # an executor bug must still come back as one observation
                observation = Observation.failure(ErrorCode.SERVER_ERROR, f"executor error: {type(exc).__name__}: {exc}")
        observation = self._redacted(spec, observation)
        observation = self._storable(spec, observation)
        return replace(observation, latency_s=round(time.monotonic() - started, 6),
                       trace_id=trace_id, span_id=span_id)

    def in_flight(self, spec: CapabilitySpec, *, idempotency_key: str | None) -> bool:
        """Whether a call with this key is still running in this process (capabilities.executors.open_calls)."""
        return OPEN_CALLS.in_flight(idempotency_key)

    def lookup_status(self, spec: CapabilitySpec, arguments: dict, *, idempotency_key: str | None = None,
                      timeout_s: float | None = None, attempt: int | None = None,
                      fence: Fence | None = None) -> Observation | None:
        """Ask whether the operation with this idempotency key committed; None if we cannot tell.
        The lookup carries the fence too: a callee that keeps the highest lease token per key
        refuses the late call of a worker that was taken over once the new one has asked."""
        # Allowed for a disabled capability too: reconciling an unknown outcome reads, never writes.
        if not spec.status_lookup:
            return None
        timeout = spec.timeout_s if timeout_s is None else timeout_s
        try:
            answer = self._lookup(spec, arguments, idempotency_key=idempotency_key, timeout_s=timeout, fence=fence)
        except Exception:  # a lookup that fails tells us nothing; the caller falls back
            return None
        if answer is None:
            return None
        committed, result = answer
        if committed:
            observation = Observation.success(result, state_changed=spec.changes_state,
                                              side_effect=SideEffectStatus.COMMITTED)
        else:
            observation = Observation.success(None, side_effect=SideEffectStatus.NOT_COMMITTED)
        return self._storable(spec, self._redacted(spec, observation))

    # For subclasses -------------------------------------------------------------

    @abstractmethod
    def _run(self, spec: CapabilitySpec, arguments: dict, *, idempotency_key: str | None, timeout_s: float,
             trace_id: str, span_id: str, fence: Fence | None = None) -> Observation:
        """Call the capability: return an Observation or raise CapabilityError."""

    def _lookup(self, spec: CapabilitySpec, arguments: dict, *, idempotency_key: str | None,
                timeout_s: float, fence: Fence | None = None) -> tuple[bool, Any] | None:
        return None

    # Helpers for subclasses -------------------------------------------------------

    @staticmethod
    def ok(spec: CapabilitySpec, output: Any, **kw: Any) -> Observation:
        """Success: a state-changing capability that answered ok has committed its effect."""
        if spec.changes_state:
            return Observation.success(output, state_changed=True, side_effect=SideEffectStatus.COMMITTED, **kw)
        return Observation.success(output, **kw)

    @staticmethod
    def fail(spec: CapabilitySpec, code: ErrorCode | str, message: str, *, sent: bool = True,
             side_effect: SideEffectStatus | None = None, **kw: Any) -> Observation:
        """Failure with the side-effect status the edge can vouch for.

        Only a timeout after the request left us is `unknown`: the callee may
        have committed and we did not hear back. Anything the callee answered
        with an error (or that never left) did not commit, unless the callee
        itself says otherwise (`side_effect`).
        """
        code = ErrorCode(code)
        if side_effect is None:
            side_effect = SideEffectStatus.NOT_COMMITTED
            if spec.changes_state and sent and code == ErrorCode.TIMEOUT:
                side_effect = SideEffectStatus.UNKNOWN
        if not spec.changes_state:
            side_effect = SideEffectStatus.NOT_COMMITTED
        return Observation.failure(code, message, side_effect=side_effect, **kw)

    # Internals ------------------------------------------------------------------

    def _refusal(self, spec: CapabilitySpec, arguments: Any, timeout_s: float) -> Observation | None:
        """Checks made before anything is sent; a refusal never commits anything."""
        if not spec.enabled:
            # Terminal and not retryable: the operator switched it off, so the
            # planner must choose an authorized alternative or stop.
            return Observation.failure(ErrorCode.PERMISSION_DENIED, f"capability {spec.name} is disabled")
        problems = argument_errors(spec, arguments)
        if problems:
            return Observation.failure(ErrorCode.INVALID_ARGUMENTS, "; ".join(p.message for p in problems))
        if timeout_s <= 0:
            return Observation.failure(ErrorCode.TIMEOUT, "no time left for the call")
        return None

    def _redacted(self, spec: CapabilitySpec, observation: Observation) -> Observation:
        """No secret value survives in an error text or an output (stored, shown in try it, sent to the
        planner): a callee that answers ok quoting the request (httpbin's /anything) quotes its secret headers."""
        environ = getattr(self, "environ", None)
        redact = self.redactor.plus(redactor_for(secret_env_names(spec.config),
                                                 os.environ if environ is None else environ).forms)
        if not redact:
            return observation
        return replace(observation, error_message=redact(observation.error_message),
                       output=redact.json_value(observation.output))

    def _storable(self, spec: CapabilitySpec, observation: Observation) -> Observation:
        """What the records can hold: each NUL character and lone surrogate of the output or the error as
        U+FFFD (both databases alike: runtime.storable), and an output over the limit kept aside by reference."""
        message = text_storable(observation.error_message)
        if message != observation.error_message:
            observation = replace(observation, error_message=message)
        if observation.output is None:
            return observation
        content = storable_json(observation.output)
        if len(content) <= spec.max_output_bytes:
            # Normalise to plain JSON so what is stored equals what was observed.
            return replace(observation, output=json.loads(content))
        digest = hashlib.sha256(content).hexdigest()
        uri = self.output_store.save(content, digest)
        preview = content[: PREVIEW_CHARS * 4].decode("utf-8", errors="ignore")[:PREVIEW_CHARS]
        ref = OutputRef(uri=uri, size_bytes=len(content), sha256=digest, preview=preview)
        return replace(observation, output=None, output_ref=ref)
