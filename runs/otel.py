"""OpenTelemetry export of runs, in the GenAI semantic conventions.

On when the standard OTLP variables name a collector (OTEL_EXPORTER_OTLP_ENDPOINT or
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none
turn it off). Each run is one trace with the run's own trace id:

- `invoke_agent`: the run, from start to stop, with its stop reason, usage and labels;
- `chat {model}` / `plan {planner}`: one per planner call, with tokens, cost, reason code;
- `execute_tool {gen_ai.tool.name}`: one per attempt, with the span id the callee
  received as the parent in its `traceparent`, and the runtime's decision on it.

Every span says its kind twice: the OTel span kind (CLIENT for a model call, INTERNAL
otherwise) and `openinference.span.kind` (AGENT, LLM, CHAIN for a non-LLM plan, TOOL),
which Phoenix shows. The span that stopped the run carries `agentops.stop_trigger=true`
and a `run_stopped` event. The service name is OTEL_SERVICE_NAME (default "agentops");
the Phoenix project is AGENTOPS_OTEL_PROJECT (default: the service name), sent as the
resource attribute `openinference.project.name`.

Spans are handed over only after the transaction that recorded them commits, to a
BatchSpanProcessor: its queue takes them without blocking, and its thread exports in
the background. A slow or dead collector costs dropped spans, never a slower or failed
run. Arguments and results are exported only with
OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true (they may hold personal data).
"""
from __future__ import annotations

import contextvars
import hashlib
import json
import logging
import os
import threading
import time
from typing import Any
from urllib.parse import urlsplit

from django.db import transaction

from capabilities.egress import guarded_session
from capabilities.executors.base import traceparent
from capabilities.netguard import NetGuard
from runs.models import Decision, Run
from runtime import events as ev
from runtime.stop import StopKind

log = logging.getLogger(__name__)

SCOPE = "agentops.runs"
CONTENT_LIMIT = 4096

_lock = threading.Lock()
_state: dict[str, Any] = {"pid": None, "tracer": None, "provider": None}
# The ids the next span takes (see _GivenIds): ours, so the backend shows what callees saw.
_next_ids: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar("agentops_otel_ids", default=None)


def enabled() -> bool:
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() in ("none", ""):
        return False
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def capture_content() -> bool:
    return os.environ.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "").strip().lower() == "true"


def w3c_trace_id(trace_id: str) -> str:
    """The trace id as callees see it in `traceparent` (runs' ids already have this shape)."""
    return traceparent(trace_id, "0" * 15 + "1").split("-")[1]


def run_span_id(trace_id: str) -> str:
    """The run's own span id, derived from its trace id so every process agrees on it."""
    return _derived_id(trace_id, "run")


def planner_span_id(trace_id: str, revision: int) -> str:
    return _derived_id(trace_id, f"plan:{revision}")


def _derived_id(trace_id: str, what: str) -> str:
    digest = hashlib.sha256(f"{trace_id}:{what}".encode()).hexdigest()
    return digest[:16] if digest[:16] != "0" * 16 else digest[16:32]


# -- the pipeline ---------------------------------------------------------------------------------

def _exporter():
    protocol = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf").strip().lower()
    if protocol != "http/protobuf":
        # gRPC's channel resolves and connects by itself, past the egress guard.
        log.warning("OTEL_EXPORTER_OTLP_PROTOCOL=%s: spans are exported over http/protobuf only (through the "
                    "egress guard); point OTEL_EXPORTER_OTLP_ENDPOINT at the collector's OTLP/HTTP port (4318)",
                    protocol)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(session=guarded_session(collector_guard()))


def collector_guard() -> NetGuard:
    """The egress guard of the export: the collector's host the operator named, and no other; a loopback or
    private address allowed (a collector beside the server), a cloud credential range never."""
    url = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or ""
    return NetGuard([urlsplit(url.strip()).hostname or ""], allow_private=True, credential_entries=False)


def _tracer():
    """The tracer of this process, built on first use (after a fork, a new one: threads do not fork)."""
    if not enabled():
        return None
    pid = os.getpid()
    if _state["pid"] == pid:
        return _state["tracer"]
    with _lock:
        if _state["pid"] != pid:
            _state["tracer"] = _build_tracer()
            _state["pid"] = pid
    return _state["tracer"]


def resource_attributes() -> dict[str, str]:
    """Who the spans are from: the service, and the Phoenix project they land in (not "default")."""
    from django.conf import settings

    service = os.environ.get("OTEL_SERVICE_NAME") or "agentops"
    return {"service.name": service, "openinference.project.name": settings.AGENTOPS_OTEL_PROJECT or service}


def _build_tracer():
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator

    class _GivenIds(IdGenerator):
        random = RandomIdGenerator()

        def generate_span_id(self) -> int:
            given = _next_ids.get()
            return given[1] if given else self.random.generate_span_id()

        def generate_trace_id(self) -> int:
            given = _next_ids.get()
            return given[0] if given else self.random.generate_trace_id()

    try:
        provider = TracerProvider(resource=Resource.create(resource_attributes()), id_generator=_GivenIds())
        provider.add_span_processor(BatchSpanProcessor(_exporter()))
    except Exception:  # a bad OTEL_* value must not break runs: say so once, export nothing
        log.exception("OpenTelemetry export is configured but could not start; runs are not exported")
        return None
    _state["provider"] = provider
    return provider.get_tracer(SCOPE)


def flush(timeout_ms: int = 5000) -> bool:
    """Export what is queued now (tests, and management commands that exit at once)."""
    provider = _state["provider"] if _state["pid"] == os.getpid() else None
    return bool(provider and provider.force_flush(timeout_ms))


# openinference.span.kind of each operation (Phoenix's span kind column).
SPAN_KINDS = {"invoke_agent": "AGENT", "chat": "LLM", "plan": "CHAIN", "execute_tool": "TOOL"}


def _emit(*, name: str, trace_id: str, span_id: str, parent_span_id: str | None, start: float, end: float,
          attributes: dict[str, Any], events: list[tuple[str, dict[str, Any], float]] = (),
          error: str | None = None) -> None:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace import (
        NonRecordingSpan,
        SpanContext,
        Status,
        StatusCode,
        TraceFlags,
    )

    tracer = _tracer()
    if tracer is None:
        return
    trace_int, span_int = int(w3c_trace_id(trace_id), 16), int(span_id, 16)
    if parent_span_id:
        parent = SpanContext(trace_int, int(parent_span_id, 16), is_remote=False, trace_flags=TraceFlags(1))
        ctx = trace.set_span_in_context(NonRecordingSpan(parent))
    else:
        ctx = otel_context.Context()  # a root: never under whatever span this thread has open
    operation = attributes.get("gen_ai.operation.name")
    attributes = {**attributes, "openinference.span.kind": SPAN_KINDS.get(operation, "CHAIN")}
    # A model call leaves the process (CLIENT); plans, tool steps (as the runtime sees them) and the run are ours.
    kind = trace.SpanKind.CLIENT if operation == "chat" else trace.SpanKind.INTERNAL
    token = _next_ids.set((trace_int, span_int))
    try:
        span = tracer.start_span(name, context=ctx, kind=kind, start_time=_ns(start), attributes=_clean(attributes))
    finally:
        _next_ids.reset(token)
    for event_name, event_attributes, at in events:
        span.add_event(event_name, _clean(event_attributes), timestamp=_ns(at))
    if error:
        span.set_status(Status(StatusCode.ERROR, error[:200]))
    span.end(end_time=_ns(max(end, start)))


def _ns(epoch_s: float) -> int:
    return int(epoch_s * 1_000_000_000)


def _clean(attributes: dict[str, Any]) -> dict[str, Any]:
    """OTel attributes take str, bool, int, float (or lists of them); None means absent."""
    out = {}
    for key, value in attributes.items():
        if value is None:
            continue
        out[key] = value if isinstance(value, (str, bool, int, float)) else str(value)
    return out


def _content(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)
    return text if len(text) <= CONTENT_LIMIT else text[:CONTENT_LIMIT] + "…"


def _safely(what: str, fn, *args) -> None:
    try:
        fn(*args)
    except Exception:  # telemetry never fails the run it describes
        log.exception("OpenTelemetry export of %s failed", what)


# -- what a run exports ---------------------------------------------------------------------------

def export_transition_on_commit(run, transition) -> None:
    """Queue one pass's planner and tool spans for export once its transaction commits."""
    if not enabled():
        return
    snapshot = {"trace_id": run.trace_id, "planner": run.planner, "model": _model_of(run)}
    transaction.on_commit(lambda: _safely("a pass", _export_transition, snapshot, transition))


def export_run_on_commit(run_id: int) -> None:
    """Queue the run's own span for export once the transaction that finished it commits."""
    if not enabled():
        return
    transaction.on_commit(lambda: _safely(f"run {run_id}", _export_run, run_id))


def _model_of(run) -> str:
    config = run.planner_config if isinstance(run.planner_config, dict) else {}
    return str(config.get("model") or run.planner)


def _export_transition(run: dict[str, Any], transition) -> None:
    decisions = {e.attempt_id: e for e in transition.events if isinstance(e, ev.DecisionMade) and e.attempt_id}
    stopped = next((e for e in transition.events if isinstance(e, ev.RunStopped)), None)
    last_plan = max((e.revision for e in transition.events if isinstance(e, ev.PlanProposed)), default=None)
    for event in transition.events:
        if isinstance(event, ev.PlanProposed):
            # A stop without an attempt in a pass that planned (a rejected plan) was the plan's.
            _export_plan(run, event, stopped if stopped and not stopped.attempt_id
                         and event.revision == last_plan else None)
        elif isinstance(event, ev.AttemptFinished):
            _export_attempt(run, event, decisions.get(event.attempt_id),
                            stopped if stopped and stopped.attempt_id == event.attempt_id else None)


def _stop_marks(stopped, at: float) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any], float]]]:
    """What marks the span that stopped the run: an attribute to filter on, and the stop as an event."""
    if stopped is None:
        return {}, []
    return ({"agentops.stop_trigger": True, "agentops.stop_reason": stopped.stop_reason},
            [("run_stopped", {"agentops.stop_reason": stopped.stop_reason,
                              "agentops.stop_detail": stopped.detail[:500]}, at)])


def _export_plan(run: dict[str, Any], event, stopped=None) -> None:
    trace_id = run["trace_id"]
    llm = run["planner"] == "llm"
    operation = "chat" if llm else "plan"
    end = event.ended_at or time.time()
    attributes = {
        "gen_ai.operation.name": operation, "gen_ai.request.model": run["model"],
        "agentops.planner": run["planner"], "agentops.plan.revision": event.revision,
        "agentops.plan.accepted": event.accepted, "agentops.plan.reason_code": event.reason_code or "initial",
        "agentops.plan.steps": len(event.steps),
        "agentops.usage.tokens": event.tokens, "agentops.usage.cost": event.cost,
        "agentops.plan.validation_errors": len(event.validation_errors),
    }
    if capture_content():  # the steps and the planner's free-text reason are content (personal data)
        attributes["gen_ai.output.messages"] = _content(list(event.steps))
        attributes["agentops.plan.reason"] = event.reason[:500] or None
    events = [(StopKind.PLAN_REJECTED.value, {"agentops.plan.errors": _content([e.to_dict() for e in event.validation_errors])},
               end)] if not event.accepted else []
    marks, stop_events = _stop_marks(stopped, end)
    attributes.update(marks)
    events += stop_events
    _emit(name=f"{operation} {run['model']}", trace_id=trace_id,
          span_id=planner_span_id(trace_id, event.revision), parent_span_id=run_span_id(trace_id),
          start=event.started_at or end, end=end, attributes=attributes, events=events,
          error=None if event.accepted else StopKind.PLAN_REJECTED.value)


def _export_attempt(run: dict[str, Any], event, decision, stopped=None) -> None:
    observation = event.observation
    trace_id = run["trace_id"]
    failed = observation.status.value != "ok"
    error_type = observation.error_code.value if failed and observation.error_code else None
    attributes = {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": event.capability,
        "gen_ai.tool.call.id": event.attempt_id, "error.type": error_type,
        "agentops.attempt.number": event.attempt, "agentops.attempt.kind": event.kind,
        "agentops.plan.revision": event.revision, "agentops.step.id": event.step_id,
        "agentops.capability.version": event.capability_version,
        "agentops.observation.status": observation.status.value,
        "agentops.observation.state_changed": observation.state_changed,
        "agentops.observation.side_effect": observation.side_effect.value,
        "agentops.observation.error_category": observation.error_category.value if observation.error_category else None,
        "agentops.repeated_without_progress": event.repeated_without_progress,
    }
    events = []
    if decision is not None:
        attributes["agentops.decision"] = decision.decision
        attributes["agentops.decision.reason"] = decision.reason[:500]
        events.append(("decision", {"agentops.decision": decision.decision,
                                    "agentops.decision.reason": decision.reason[:500]}, event.ended_at))
    marks, stop_events = _stop_marks(stopped, event.ended_at)
    attributes.update(marks)
    events += stop_events
    if capture_content():
        attributes["gen_ai.tool.call.arguments"] = _content(event.arguments)
        if observation.output is not None:
            attributes["gen_ai.tool.call.result"] = _content(observation.output)
    span_id = (observation.span_id or "").lower()
    if len(span_id) != 16:

        span_id = traceparent(trace_id, observation.span_id or event.attempt_id).split("-")[2]
    _emit(name=f"execute_tool {event.capability}", trace_id=trace_id, span_id=span_id,
          parent_span_id=run_span_id(trace_id), start=event.started_at, end=event.ended_at,
          attributes=attributes, events=events, error=observation.error_message or error_type if failed else None)


def _export_run(run_id: int) -> None:
    run = Run.objects.filter(pk=run_id).first()
    if run is None or not run.finished_at:
        return
    start = (run.started_at or run.created_at).timestamp()
    end = run.finished_at.timestamp()
    failed = run.stop_reason not in (StopKind.COMPLETED, StopKind.CANCELLED)
    attributes = {
        # A gateway session's run is the MCP agent's: named as the operator registered it.
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": (run.labels or {}).get("agent") or "agentops",
        "gen_ai.agent.id": str(run.pk),
        "gen_ai.request.model": _model_of(run), "agentops.run.id": run.pk,
        "agentops.planner": run.planner, "agentops.run.status": run.status,
        "agentops.stop_reason": run.stop_reason, "agentops.stop_detail": run.stop_detail[:500],
        "agentops.stall_kind": getattr(run, "stall_kind", None) or None,
        "error.type": run.stop_reason if failed else None,
        "agentops.usage.iterations": run.iterations, "agentops.usage.revisions": run.revisions,
        "agentops.usage.tool_calls": run.tool_calls, "agentops.usage.retries": run.retries,
        "agentops.usage.tokens": run.tokens, "agentops.usage.cost": run.cost,
        "agentops.approvals_requested": run.approvals_requested,
    }
    if capture_content():  # the goal is the operator's text: content, like the messages
        attributes["agentops.run.goal"] = run.goal[:500]
    for key, value in (getattr(run, "labels", None) or {}).items():
        attributes[f"agentops.label.{key}"] = str(value)
    # Decisions on attempts are on their tool spans; the others (plan rejected, stop) are the run's.
    events = [("decision", {"agentops.decision": d.decision, "agentops.decision.reason": d.reason[:500]},
               d.created_at.timestamp())
              for d in Decision.objects.filter(run=run, attempt__isnull=True).order_by("created_at", "id")[:100]]
    events.append(("run_stopped", {"agentops.stop_reason": run.stop_reason,
                                   "agentops.stop_detail": run.stop_detail[:500]}, end))
    _emit(name="invoke_agent", trace_id=run.trace_id, span_id=run_span_id(run.trace_id), parent_span_id=None,
          start=start, end=end, attributes=attributes, events=events,
          error=run.stop_reason if failed else None)


# -- optional: Django and Celery instrumentation -------------------------------------------------

def instrument_frameworks() -> bool:
    """Request and task spans too, when the OTLP variables are set and the optional
    instrumentation packages are installed (pip install -e '.[otel-instrumentation]').

    They go through the process-wide tracer provider, a provider of their own: the runs'
    spans keep their own ids and pipeline either way. Returns whether anything was instrumented.
    """
    if not enabled() or _state.get("frameworks"):
        return False
    try:
        from opentelemetry.instrumentation.celery import CeleryInstrumentor
        from opentelemetry.instrumentation.django import DjangoInstrumentor
    except ImportError:
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider = TracerProvider(resource=Resource.create(resource_attributes()))
        provider.add_span_processor(BatchSpanProcessor(_exporter()))
        trace.set_tracer_provider(provider)
        DjangoInstrumentor().instrument()
        CeleryInstrumentor().instrument()
    except Exception:  # instrumentation is a convenience: never a reason not to start
        log.exception("Django/Celery instrumentation could not start")
        return False
    _state["frameworks"] = True
    return True
