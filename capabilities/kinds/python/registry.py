"""Python capabilities: plain functions registered in code with `@capability`.

    @capability(side_effect="write", idempotent=True, permission="tickets.create")
    def create_ticket(title: str, body: str = "", *, context: CallContext) -> dict:
        '''Open a support ticket.'''

The argument JSON Schema is derived from the annotated signature unless given;
the docstring's first line is the description. A keyword-only `context`
parameter receives a `CallContext` and is not part of the schema. The registry
only describes functions; the Django registry turns a definition into a
CapabilityVersion row via `to_spec()`.
"""
from __future__ import annotations

import importlib
import inspect
import json
import time
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from django.db import DatabaseError, transaction

from capabilities.executors.base import CapabilityError
from capabilities.executors.fence import Fence
from runtime.capability import CapabilitySpec, Kind, PollingPolicy, RetryPolicy, SideEffect
from runtime.observation import ErrorCode, SideEffectStatus

CONTEXT_PARAMETER = "context"

StatusLookup = Callable[[dict, "str | None"], "tuple[bool, Any]"]


@dataclass(frozen=True)
class CallContext:
    """What a capability may know about the call it is serving.

    `deadline` is on the `time.monotonic()` clock; past it the executor has
    already given up on the call and will discard its result. `fence` (state-changing
    calls of a run) says whether this call still speaks for the run: check
    `context.fence.still_current()` inside the transaction that commits the effect, and
    commit nothing when it is False (a worker paused past its lease whose run was taken
    over: its late call must not land beside the new worker's).
    """

    idempotency_key: str | None = None
    trace_id: str = ""
    span_id: str = ""
    deadline: float | None = None
    fence: Fence | None = None

    def remaining_s(self) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())


@dataclass(frozen=True)
class CapabilityDefinition:
    name: str
    function: Callable[..., Any]
    description: str
    schema: dict[str, Any]
    side_effect: SideEffect = SideEffect.NONE
    requires_approval: bool = False
    idempotent: bool = False
    permission: str = ""
    timeout_s: float = 10.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    polling: PollingPolicy | None = None
    status_lookup: StatusLookup | None = None
    settle_s: float | None = None

    @property
    def dotted_path(self) -> str:
        return dotted_path(self.function)

    @property
    def accepts_context(self) -> bool:
        return accepts_context(self.function)

    def to_spec(self, *, version: int = 1) -> CapabilitySpec:
        config: dict[str, Any] = {"function": self.dotted_path}
        if self.status_lookup is not None:
            config["status_lookup"] = dotted_path(self.status_lookup)
        return CapabilitySpec(
            name=self.name, kind=Kind.PYTHON, version=version, description=self.description,
            schema=self.schema, timeout_s=self.timeout_s, retry=self.retry, side_effect=self.side_effect,
            requires_approval=self.requires_approval, idempotent=self.idempotent,
            status_lookup=self.status_lookup is not None, permission=self.permission,
            polling=self.polling, settle_s=self.settle_s, config=config,
        )


_REGISTRY: dict[str, CapabilityDefinition] = {}


def capability(name: str | None = None, description: str | None = None, schema: dict | None = None,
               side_effect: str | SideEffect = "none", requires_approval: bool = False, idempotent: bool = False,
               permission: str = "", timeout_s: float = 10, retry: dict | RetryPolicy | None = None,
               polling: dict | PollingPolicy | None = None,
               status_lookup: StatusLookup | None = None,
               settle_s: float | None = None) -> Callable[[Callable], Callable]:
    """Register a function as a python capability; the function itself is returned unchanged."""

    def register(function: Callable) -> Callable:
        definition = CapabilityDefinition(
            name=name or function.__name__,
            function=function,
            description=description if description is not None else first_doc_line(function),
            schema=schema if schema is not None else schema_from_signature(function),
            side_effect=SideEffect(side_effect),
            requires_approval=requires_approval,
            idempotent=idempotent,
            permission=permission,
            timeout_s=float(timeout_s),
            retry=retry if isinstance(retry, RetryPolicy) else RetryPolicy.from_dict(retry),
            polling=polling if polling is None or isinstance(polling, PollingPolicy) else PollingPolicy(**polling),
            status_lookup=status_lookup,
            settle_s=None if settle_s is None else float(settle_s),
        )
        existing = _REGISTRY.get(definition.name)
        if existing is not None and existing.dotted_path != definition.dotted_path:
            raise ValueError(f"capability {definition.name!r} is already registered by {existing.dotted_path}")
        _REGISTRY[definition.name] = definition
        function.__capability__ = definition  # type: ignore[attr-defined]
        return function

    return register


def commit_fenced(context: CallContext, write: Callable[[], Any]) -> Any:
    """Commit `write()` only while the call still speaks for its run (`context.fence`).

    The check and the write share one transaction on the AgentOps database, where the
    check locks the run row: a worker taking the run over waits for this commit, and its
    status lookup then sees it. A paused worker's late call commits nothing.
    """
    written = False
    try:
        with transaction.atomic():
            if context.fence is not None and not context.fence.still_current():
                raise CapabilityError(ErrorCode.CONFLICT, f"the run's lease {context.fence.lease_token} was taken "
                                      "over by another worker: this late call commits nothing",
                                      side_effect=SideEffectStatus.NOT_COMMITTED)
            result = write()
            written = True
    except DatabaseError as exc:
        if not written:
            raise   # nothing was written: an ordinary failure
        # Written, but the transaction did not end cleanly (the database went away at COMMIT):
        # whether the effect holds is unknown, and the runtime resolves it (re-send or lookup).
        raise CapabilityError(ErrorCode.CONNECTION_ERROR, f"the database failed as the effect was committed: {exc}",
                              side_effect=SideEffectStatus.UNKNOWN) from None
    return result


def registered_capabilities() -> dict[str, CapabilityDefinition]:
    """Every registered python capability by name (only modules already imported register)."""
    return dict(_REGISTRY)


def autodiscover(module_names: Iterable[str] = ("capabilities.demo.functions",)) -> dict[str, CapabilityDefinition]:
    """Import the modules whose decorators register capabilities, then list them."""
    for module_name in module_names:
        importlib.import_module(module_name)
    return registered_capabilities()


def dotted_path(function: Callable) -> str:
    return f"{function.__module__}:{function.__qualname__}"


def resolve(path: str) -> Callable:
    """`module:qualname` → the object; ImportError/AttributeError when it is gone."""
    module_name, _, qualname = path.partition(":")
    if not module_name or not qualname:
        raise ValueError(f"expected 'module:qualname', got {path!r}")
    target: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


def definition_for(function: Callable) -> CapabilityDefinition | None:
    return getattr(function, "__capability__", None)


def accepts_context(function: Callable) -> bool:
    parameter = inspect.signature(function).parameters.get(CONTEXT_PARAMETER)
    return parameter is not None and parameter.kind == inspect.Parameter.KEYWORD_ONLY


def first_doc_line(function: Callable) -> str:
    doc = inspect.getdoc(function) or ""
    return doc.strip().splitlines()[0].strip() if doc.strip() else ""


# -- schema derivation ----------------------------------------------------------------

_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


def schema_from_signature(function: Callable) -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of the function's keyword arguments.

    Parameters with defaults are optional; unknown properties are refused.
    Unannotated parameters and *args/**kwargs are refused at registration, so a
    capability's contract is always explicit.
    """
    hints = typing.get_type_hints(function, include_extras=True)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for parameter in inspect.signature(function).parameters.values():
        if parameter.name == CONTEXT_PARAMETER and parameter.kind == inspect.Parameter.KEYWORD_ONLY:
            continue
        if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise TypeError(f"{function.__qualname__}: *args/**kwargs cannot be described; pass schema=")
        if parameter.kind == inspect.Parameter.POSITIONAL_ONLY:
            raise TypeError(f"{function.__qualname__}: positional-only parameter {parameter.name} cannot be passed by name")
        if parameter.name not in hints:
            raise TypeError(f"{function.__qualname__}: annotate parameter {parameter.name!r} or pass schema=")
        prop = type_schema(hints[parameter.name])
        if parameter.default is inspect.Parameter.empty:
            required.append(parameter.name)
        elif _is_json(parameter.default):
            prop = {**prop, "default": parameter.default}
        properties[parameter.name] = prop
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


def type_schema(annotation: Any) -> dict[str, Any]:
    """JSON Schema for one annotation: str/int/float/bool/None, list/dict, Optional/Union, Literal, Annotated."""
    if annotation is Any:
        return {}
    if isinstance(annotation, type) and annotation in _SIMPLE:
        return {"type": _SIMPLE[annotation]}
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        # Annotated[int, "what it is", {"minimum": 1}]: strings describe, dicts add keywords.
        schema = type_schema(args[0])
        for extra in args[1:]:
            if isinstance(extra, str):
                schema = {**schema, "description": extra}
            elif isinstance(extra, dict):
                schema = {**schema, **extra}
        return schema
    if origin is Literal:
        schema: dict[str, Any] = {"enum": list(args)}
        kinds = {_SIMPLE.get(type(a)) for a in args}
        if len(kinds) == 1 and None not in kinds:
            schema["type"] = kinds.pop()
        return schema
    if origin in (typing.Union, types.UnionType):
        options = [type_schema(a) for a in args]
        if all(set(o) == {"type"} and isinstance(o["type"], str) for o in options):
            return {"type": [o["type"] for o in options]}
        return {"anyOf": options}
    if annotation is list or origin is list:
        return {"type": "array", "items": type_schema(args[0])} if args else {"type": "array"}
    if annotation is dict or origin is dict:
        if len(args) == 2:
            if args[0] is not str:
                raise TypeError(f"JSON object keys are strings; cannot describe {annotation!r}")
            return {"type": "object", "additionalProperties": type_schema(args[1])}
        return {"type": "object"}
    raise TypeError(f"cannot derive a JSON Schema for {annotation!r}; pass schema=")


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True
