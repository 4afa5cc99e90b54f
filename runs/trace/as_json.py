"""A run's trace as JSON: one function per shape, for the trace download and the API alike.

The download (`trace_chunks`) writes the whole trace as one document, piece by piece as it is
read; the API answers with the same items (runs.api.runs documents them for OpenAPI). Every
timestamp is ISO 8601 UTC text with microseconds ("2026-12-01T15:00:00.123456Z"), the text
the database makes for the attempts (selectors.IsoText), so both answer alike whichever
encoder renders them.
"""
from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime

import orjson
from django.core.serializers.json import DjangoJSONEncoder
from django.urls import reverse

from runs import selectors
from runs.dashboard.budget_usage import revisions_used, run_budget_usage
from runs.models import Approval, PlannerCall, PlanRevision, Run, Step
from runs.trace.labels import attempt_label

USAGE_FIELDS = ("iterations", "tool_calls", "retries", "tokens", "cost", "side_effects_committed",
                "approvals_requested", "repeated_attempts")


def iso(value: datetime | None) -> str | None:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ") if value else None


def run_dict(run: Run) -> dict:
    # `revisions`: replans after the first plan, as the max_revisions budget and the page count
    # them; `plans`: every plan received, the first included.
    usage = {"iterations": run.iterations, "revisions": revisions_used(run), "plans": run.revisions,
             **{name: getattr(run, name) for name in USAGE_FIELDS[1:]}}
    return {
        "id": run.pk, "goal": run.goal, "completion": run.completion, "budgets": run.budgets,
        "planner": run.planner, "owner": run.owner.get_username(), "require_plan_approval": run.require_plan_approval,
        "status": run.status, "stop_reason": run.stop_reason or None, "stop_detail": run.stop_detail,
        "stop_attempt": run.stop_attempt.uid if run.stop_attempt_id else None, "stall_kind": run.stall_kind,
        **usage,
        "trace_id": run.trace_id, "created_at": iso(run.created_at), "started_at": iso(run.started_at),
        "finished_at": iso(run.finished_at), "deadline_at": iso(run.deadline_at),
        "cancel_requested_at": iso(run.cancel_requested_at), "budget_usage": run_budget_usage(run),
        "labels": run.labels, "tokens_estimated": run.tokens_estimated, "cost_estimated": run.cost_estimated,
        "forked_from": run.forked_from_id, "forked_at": run.forked_at,
    }


def revision_dict(revision: PlanRevision) -> dict:
    return {
        "number": revision.number, "accepted": revision.accepted, "reason_code": revision.reason_code,
        "reason": revision.reason,
        "triggering_attempt": revision.triggering_attempt.uid if revision.triggering_attempt_id else None,
        "steps": revision.steps, "changes": revision.changes, "validation_errors": revision.validation_errors,
        "tokens": revision.tokens, "cost": revision.cost, "planner_output": revision.planner_output,
        "capabilities_seen": revision.capabilities_seen, "needs_approval": revision.needs_approval,
        "created_at": iso(revision.created_at),
    }


def planner_call_dict(call: PlannerCall) -> dict:
    """A written-ahead planner call: `lost` with its worker, counted at its ceiling when `estimated`."""
    return {"revision": call.revision, "started_at": iso(call.started_at), "ended_at": iso(call.ended_at),
            "tokens": call.tokens, "cost": call.cost, "max_tokens": call.max_tokens, "max_cost": call.max_cost,
            "in_flight": call.in_flight, "lost": call.lost, "estimated": call.estimated, "worker": call.worker}


def step_dict(step: Step) -> dict:
    return {
        "revision": step.revision.number, "index": step.index, "key": step.key, "capability": step.capability_name,
        "capability_version": step.capability_version.number if step.capability_version_id else None,
        "arguments": step.arguments,
        "arguments_hash": step.arguments_hash, "expected_outcome": step.expected_outcome,
        "depends_on": step.depends_on, "status": step.status, "approval_state": step.approval_state,
    }


def approval_dict(approval: Approval) -> dict:
    return {
        "id": approval.pk, "run": approval.run_id, "run_goal": approval.run.goal, "kind": approval.kind,
        "revision": approval.revision.number, "step": approval.step.key if approval.step_id else None,
        "capability": approval.capability_name, "arguments": approval.arguments,
        "arguments_hash": approval.arguments_hash, "plan_hash": approval.plan_hash, "state": approval.state,
        "requested_at": iso(approval.requested_at), "expires_at": iso(approval.expires_at),
        "decided_at": iso(approval.decided_at),
        "decided_by": approval.decided_by.get_username() if approval.decided_by_id else None,
        "comment": approval.comment,
    }


def decision_dict(*, decision: str, reason: str, usage, created_at: str | None) -> dict:
    return {"decision": decision, "reason": reason, "usage": usage, "created_at": created_at}


_DJANGO_DEFAULT = DjangoJSONEncoder().default
_ORJSON_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME


def _dumps(value) -> str:
    """JSON text through orjson (an attempt's item in about a tenth of the standard library's time,
    the bulk of the download's CPU), with Django's encoder for what JSON lacks (datetimes, Decimal),
    as before; the standard library for what orjson declines (integers beyond 64 bits, nesting
    deeper than 254 levels), so what was written before is written still. Compact: no spaces
    after separators."""
    try:
        return orjson.dumps(value, default=_DJANGO_DEFAULT, option=_ORJSON_OPTIONS).decode()
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value, cls=DjangoJSONEncoder, ensure_ascii=False, separators=(",", ":"))


def _loads(text: str | None):
    return None if text is None else json.loads(text)


class AttemptJson:
    """One run's attempts as JSON, from the rows of selectors.trace_attempt_rows.

    `text` writes an item with its outputs, arguments and usage as the database's own JSON
    text: each is put in place of a per-instance random marker after the rest is serialised,
    so nothing is parsed and serialised again (the download runs at the rate the rows are
    read). A marker cannot occur in the data: it is new for each instance. `value` is the
    same item as Python data, for the API.
    """

    def __init__(self, run_id: int):
        self.token = uuid.uuid4().hex
        self.marks = tuple(f"\x00{self.token}{kind}" for kind in "oau")
        self.quoted = tuple(_dumps(mark) for mark in self.marks)
        self.output_uri = reverse("runs:output", args=[run_id, self.token]).replace(self.token, "{}")

    def item(self, a: dict, *, output, arguments, usage) -> dict:
        decision = None
        if a["decision__id"] is not None:
            decision = decision_dict(decision=a["decision__decision"], reason=a["decision__reason"], usage=usage,
                                     created_at=a["decided_text"])
        output_ref = None
        if a["output_ref_id"] is not None:
            output_ref = {"uri": self.output_uri.format(a["uid"]), "sha256": a["output_ref__sha256"],
                          "size_bytes": a["output_ref__size_bytes"]}
        revision = a["step__revision__number"]
        return {
            "uid": a["uid"], "revision": revision, "step": a["step__key"], "number": a["number"], "kind": a["kind"],
            # The same unique label as the trace page: r2·s1#1.
            "label": attempt_label(revision, a["step__key"], a["number"]),
            "capability": a["capability_name"], "capability_version": a["capability_version__number"],
            "arguments": arguments, "signature": a["signature"], "signature_hash": a["signature_hash"],
            "idempotency_key": a["idempotency_key"], "started_at": a["started_text"], "ended_at": a["ended_text"],
            "latency_s": a["latency_s"], "trace_id": a["trace_id"], "span_id": a["span_id"],
            "repeated_without_progress": a["repeated_without_progress"],
            "observation": {
                "status": a["status"], "state_changed": a["state_changed"], "output": output,
                "output_ref": output_ref, "error_code": a["error_code"] or None,
                "error_category": a["error_category"] or None, "error_message": a["error_message"],
                "retry_guidance": a["retry_guidance"], "retry_after_s": a["retry_after_s"],
                "side_effect": a["side_effect_status"],
            },
            "decision": decision,
        }

    def value(self, row: tuple) -> dict:
        a = dict(zip(selectors.TRACE_ATTEMPT_COLUMNS, row, strict=False))
        return self.item(a, output=_loads(a["output_json"]), arguments=_loads(a["arguments_json"]),
                         usage=_loads(a["usage_json"]))

    def text(self, row: tuple) -> str:
        a = dict(zip(selectors.TRACE_ATTEMPT_COLUMNS, row, strict=False))
        output_mark, arguments_mark, usage_mark = self.marks
        output_quoted, arguments_quoted, usage_quoted = self.quoted
        text = _dumps(self.item(a, output=output_mark, arguments=arguments_mark, usage=usage_mark))
        text = text.replace(arguments_quoted, a["arguments_json"] or "null", 1)
        text = text.replace(output_quoted, a["output_json"] or "null", 1)
        if a["decision__id"] is not None:
            text = text.replace(usage_quoted, a["usage_json"] or "null", 1)
        return text


def attempt_values(run: Run, rows: Iterable[tuple]) -> list[dict]:
    """Attempts as the API answers them (a page of selectors.trace_attempt_rows)."""
    shape = AttemptJson(run.pk)
    return [shape.value(row) for row in rows]


def _attempt_chunks(run: Run, rows_per_chunk: int = 200) -> Iterator[str]:
    """The attempts array's items, a chunk per `rows_per_chunk` attempts."""
    shape = AttemptJson(run.pk)
    buffer = []
    for i, row in enumerate(selectors.trace_attempt_stream(run=run)):
        buffer.append(("," if i else "") + shape.text(row))
        if len(buffer) >= rows_per_chunk:
            yield "".join(buffer)
            buffer = []
    yield "".join(buffer)


def _array(items: Iterable[dict]) -> Iterator[str]:
    for i, item in enumerate(items):
        yield ("," if i else "") + _dumps(item)


def trace_chunks(run: Run) -> Iterator[str]:
    """The whole trace as one JSON document, written piece by piece as it is read."""
    yield '{"run": ' + _dumps(run_dict(run))
    yield ', "revisions": ['
    yield from _array(map(revision_dict, selectors.trace_revisions(run=run)))
    yield '], "planner_calls": ['
    yield from _array(map(planner_call_dict, selectors.trace_planner_calls(run=run)))
    yield '], "steps": ['
    yield from _array(map(step_dict, selectors.trace_steps(run=run)))
    yield '], "attempts": ['
    yield from _attempt_chunks(run)
    yield '], "decisions_without_attempt": ['
    yield from _array(decision_dict(decision=d.decision, reason=d.reason, usage=d.usage, created_at=iso(d.created_at))
                      for d in selectors.trace_decisions_without_attempt(run=run))
    yield '], "approvals": ['
    yield from _array(map(approval_dict, selectors.trace_approvals(run=run)))
    yield "]}"

