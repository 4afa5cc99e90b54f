"""The python executor and the @capability registry, through real function calls."""
from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Annotated, Any, Literal

import pytest

from capabilities.executors.base import CapabilityError, FileOutputStore
from capabilities.kinds.python.executor import PythonExecutor
from capabilities.kinds.python.registry import (
    CallContext,
    capability,
    registered_capabilities,
    resolve,
    schema_from_signature,
)
from runs.runtime.capability import Kind, SideEffect
from runs.runtime.observation import ErrorCode, SideEffectStatus, Status

SEEN_CONTEXTS: list[CallContext] = []
COMMITTED: dict[str, dict] = {}
ABANDONED = threading.Event()


@capability(name="test_py_echo")
def echo(text: str, times: int = 1) -> dict:
    """Repeat a text.

    Longer explanation that is not part of the description.
    """
    return {"text": text * times}


@capability(name="test_py_with_context", side_effect="write", idempotent=True)
def with_context(value: int, *, context: CallContext) -> dict:
    """Record the call context."""
    SEEN_CONTEXTS.append(context)
    return {"value": value, "key": context.idempotency_key}


@capability(name="test_py_raises")
def raises(kind: str) -> None:
    """Raise the exception named by kind."""
    errors = {
        "timeout": TimeoutError("upstream timed out"),
        "permission": PermissionError("not yours"),
        "lookup": LookupError("no such thing"),
        "key": KeyError("ticket-9"),
        "value": ValueError("bad value"),
        "type": TypeError("bad type"),
        "connection": ConnectionError("refused"),
        "runtime": RuntimeError("kaput"),
        "rate": CapabilityError("rate_limited", "slow down", retry_after_s=12),
        "conflict": CapabilityError(ErrorCode.CONFLICT, "already closed"),
    }
    raise errors[kind]


@capability(name="test_py_write_fails", side_effect="write")
def write_fails(mode: str) -> None:
    """A write that fails after committing, and says so."""
    if mode == "committed":
        raise CapabilityError("server_error", "post-commit hook failed", side_effect="committed")
    raise RuntimeError("failed before writing")


@capability(name="test_py_sleepy", side_effect="write", timeout_s=0.2)
def sleepy(seconds: float) -> str:
    """Sleep longer than the timeout."""
    time.sleep(seconds)
    ABANDONED.set()
    return "late"


@capability(name="test_py_big")
def big(count: int) -> list[str]:
    """Return a large output."""
    return [f"row {i:05d}" for i in range(count)]


@capability(name="test_py_async")
async def async_add(a: int, b: int) -> int:
    """An async capability."""
    return a + b


def order_status(arguments: dict, idempotency_key: str | None) -> tuple[bool, Any]:
    order = COMMITTED.get(idempotency_key or "")
    return (order is not None), order


@capability(name="test_py_order", side_effect="write", idempotent=True, status_lookup=order_status)
def place_order(item: str, *, context: CallContext) -> dict:
    """Place an order, once per idempotency key."""
    return COMMITTED.setdefault(context.idempotency_key, {"item": item, "order": len(COMMITTED) + 1})


def spec_of(function, **changes):
    return replace(function.__capability__.to_spec(), **changes)


@pytest.fixture
def executor(tmp_path):
    return PythonExecutor(output_store=FileOutputStore(tmp_path / "outputs"))


class TestRegistry:
    def test_it_derives_the_schema_from_the_signature(self):
        def sample(name: str, count: int, ratio: float = 0.5, flag: bool = False, tags: list[str] | None = None,
                   mode: Literal["fast", "slow"] = "fast", extra: dict[str, int] | None = None,
                   note: str | None = None, level: Annotated[int, "how loud", {"minimum": 0}] = 1, *,
                   context: CallContext | None = None) -> None:
            pass

        schema = schema_from_signature(sample)
        assert schema["required"] == ["name", "count"]
        assert schema["additionalProperties"] is False
        props = schema["properties"]
        assert props["name"] == {"type": "string"}
        assert props["count"] == {"type": "integer"}
        assert props["ratio"] == {"type": "number", "default": 0.5}
        assert props["flag"] == {"type": "boolean", "default": False}
        assert props["tags"] == {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}],
                                 "default": None}
        assert props["mode"] == {"enum": ["fast", "slow"], "type": "string", "default": "fast"}
        assert props["extra"]["anyOf"][0] == {"type": "object", "additionalProperties": {"type": "integer"}}
        assert props["note"] == {"type": ["string", "null"], "default": None}
        assert props["level"] == {"type": "integer", "description": "how loud", "minimum": 0, "default": 1}
        assert "context" not in props

    def test_it_refuses_parameters_it_cannot_describe(self):
        def unannotated(x):
            pass

        def var_kwargs(**kw: int):
            pass

        with pytest.raises(TypeError, match="annotate"):
            schema_from_signature(unannotated)
        with pytest.raises(TypeError):
            schema_from_signature(var_kwargs)

    def test_it_takes_the_description_from_the_docstring_first_line(self):
        assert echo.__capability__.description == "Repeat a text."

    def test_it_lists_registered_capabilities_as_python_specs(self):
        definition = registered_capabilities()["test_py_echo"]
        spec = definition.to_spec()
        assert spec.kind == Kind.PYTHON
        assert spec.config == {"function": f"{echo.__module__}:echo"}
        assert resolve(spec.config["function"]) is echo
        assert spec.schema["required"] == ["text"]

    def test_it_records_the_policy_given_to_the_decorator(self):
        spec = place_order.__capability__.to_spec()
        assert spec.side_effect == SideEffect.WRITE
        assert spec.idempotent and spec.status_lookup
        assert spec.config["status_lookup"].endswith(":order_status")

    def test_it_refuses_a_second_function_under_the_same_name(self):
        with pytest.raises(ValueError, match="already registered"):
            @capability(name="test_py_echo")
            def other(text: str) -> None:
                pass

    def test_the_decorated_function_stays_callable(self):
        assert echo("ab", times=2) == {"text": "abab"}


class TestExecution:
    def test_it_returns_the_function_result_as_an_ok_observation(self, executor):
        observation = executor.execute(spec_of(echo), {"text": "hi", "times": 3}, idempotency_key=None,
                                       timeout_s=2, trace_id="trace-1", span_id="span-1")
        assert observation.status == Status.OK
        assert observation.output == {"text": "hihihi"}
        assert observation.side_effect == SideEffectStatus.NOT_COMMITTED
        assert not observation.state_changed
        assert observation.trace_id == "trace-1" and observation.span_id == "span-1"
        assert observation.latency_s >= 0

    def test_it_refuses_arguments_that_fail_the_schema_without_calling(self, executor):
        observation = executor.execute(spec_of(echo), {"text": 5, "bogus": True}, timeout_s=2)
        assert observation.error_code == ErrorCode.INVALID_ARGUMENTS
        assert observation.status == Status.TERMINAL
        assert "text" in observation.error_message and "bogus" in observation.error_message

    def test_it_refuses_arguments_over_the_size_limit(self, executor):
        observation = executor.execute(spec_of(echo, max_argument_bytes=20), {"text": "x" * 100}, timeout_s=2)
        assert observation.error_code == ErrorCode.INVALID_ARGUMENTS
        assert "limit" in observation.error_message

    def test_it_never_runs_a_disabled_capability(self, executor):
        observation = executor.execute(spec_of(echo, enabled=False), {"text": "hi"}, timeout_s=2)
        assert observation.error_code == ErrorCode.PERMISSION_DENIED
        assert "disabled" in observation.error_message

    def test_it_passes_the_call_context(self, executor):
        before = time.monotonic()
        observation = executor.execute(spec_of(with_context), {"value": 4}, idempotency_key="key-1",
                                       timeout_s=3, trace_id="t" * 32, span_id="s" * 16)
        assert observation.output == {"value": 4, "key": "key-1"}
        context = SEEN_CONTEXTS[-1]
        assert (context.idempotency_key, context.trace_id, context.span_id) == ("key-1", "t" * 32, "s" * 16)
        assert before + 2.5 < context.deadline <= time.monotonic() + 3

    def test_a_successful_write_is_committed_and_changes_state(self, executor):
        observation = executor.execute(spec_of(with_context), {"value": 1}, idempotency_key="k", timeout_s=2)
        assert observation.side_effect == SideEffectStatus.COMMITTED
        assert observation.state_changed

    @pytest.mark.parametrize("kind, code, status", [
        ("timeout", ErrorCode.TIMEOUT, Status.RETRYABLE),
        ("permission", ErrorCode.PERMISSION_DENIED, Status.TERMINAL),
        ("lookup", ErrorCode.NOT_FOUND, Status.TERMINAL),
        ("key", ErrorCode.NOT_FOUND, Status.TERMINAL),
        ("value", ErrorCode.INVALID_ARGUMENTS, Status.TERMINAL),
        ("type", ErrorCode.INVALID_ARGUMENTS, Status.TERMINAL),
        ("connection", ErrorCode.CONNECTION_ERROR, Status.RETRYABLE),
        ("runtime", ErrorCode.SERVER_ERROR, Status.RETRYABLE),
        ("conflict", ErrorCode.CONFLICT, Status.TERMINAL),
    ])
    def test_it_maps_exceptions_to_error_codes(self, executor, kind, code, status):
        observation = executor.execute(spec_of(raises), {"kind": kind}, timeout_s=2)
        assert (observation.error_code, observation.status) == (code, status)
        assert observation.error_message

    def test_it_keeps_the_exception_text_of_an_unexpected_error(self, executor):
        observation = executor.execute(spec_of(raises), {"kind": "runtime"}, timeout_s=2)
        assert observation.error_message == "RuntimeError: kaput"

    def test_a_capability_error_carries_its_retry_after(self, executor):
        observation = executor.execute(spec_of(raises), {"kind": "rate"}, timeout_s=2)
        assert observation.error_code == ErrorCode.RATE_LIMITED
        assert observation.retry_after_s == 12

    def test_a_failed_write_did_not_commit_unless_it_says_so(self, executor):
        failed = executor.execute(spec_of(write_fails), {"mode": "before"}, timeout_s=2)
        told = executor.execute(spec_of(write_fails), {"mode": "committed"}, timeout_s=2)
        assert failed.side_effect == SideEffectStatus.NOT_COMMITTED
        assert told.side_effect == SideEffectStatus.COMMITTED

    def test_it_abandons_a_call_past_its_timeout_with_an_unknown_outcome(self, executor):
        ABANDONED.clear()
        started = time.monotonic()
        observation = executor.execute(spec_of(sleepy), {"seconds": 1.0}, idempotency_key="k", timeout_s=0.2)
        assert time.monotonic() - started < 0.8
        assert observation.error_code == ErrorCode.TIMEOUT
        assert observation.status == Status.RETRYABLE
        # The function may still write: only a lookup can tell.
        assert observation.side_effect == SideEffectStatus.UNKNOWN
        assert "abandoned" in observation.error_message
        assert ABANDONED.wait(2)  # it did finish later; its result went nowhere

    def test_it_stores_an_output_over_the_limit_by_reference(self, executor, tmp_path):
        spec = spec_of(big, max_output_bytes=1000)
        observation = executor.execute(spec, {"count": 500}, timeout_s=2)
        assert observation.status == Status.OK
        assert observation.output is None
        ref = observation.output_ref
        assert ref.size_bytes > 1000 and len(ref.sha256) == 64
        assert ref.preview.startswith('["row 00000"')
        assert executor.output_store.read(ref.uri) == [f"row {i:05d}" for i in range(500)]
        assert (tmp_path / "outputs" / f"{ref.sha256}.json").exists()

    def test_it_keeps_an_output_under_the_limit_inline(self, executor):
        observation = executor.execute(spec_of(big, max_output_bytes=1000), {"count": 3}, timeout_s=2)
        assert observation.output == ["row 00000", "row 00001", "row 00002"]
        assert observation.output_ref is None

    def test_it_runs_async_functions(self, executor):
        assert executor.execute(spec_of(async_add), {"a": 2, "b": 3}, timeout_s=2).output == 5

    def test_it_reports_a_missing_function_as_not_found(self, executor):
        spec = replace(spec_of(echo), config={"function": "nowhere.module:gone"})
        observation = executor.execute(spec, {"text": "x"}, timeout_s=2)
        assert observation.error_code == ErrorCode.NOT_FOUND


class TestStatusLookup:
    def test_it_reports_a_committed_operation_with_its_result(self, executor):
        spec = spec_of(place_order)
        executor.execute(spec, {"item": "chair"}, idempotency_key="order-1", timeout_s=2)
        observation = executor.lookup_status(spec, {"item": "chair"}, idempotency_key="order-1", timeout_s=2)
        assert observation.status == Status.OK
        assert observation.side_effect == SideEffectStatus.COMMITTED
        assert observation.output["item"] == "chair"

    def test_it_reports_an_operation_that_never_committed(self, executor):
        observation = executor.lookup_status(spec_of(place_order), {"item": "desk"}, idempotency_key="never",
                                             timeout_s=2)
        assert observation.side_effect == SideEffectStatus.NOT_COMMITTED
        assert observation.output is None

    def test_it_cannot_tell_without_a_status_lookup(self, executor):
        assert executor.lookup_status(spec_of(echo), {"text": "x"}, idempotency_key="k", timeout_s=2) is None
