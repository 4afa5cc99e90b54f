"""Factories for run records, as fixtures (tests import nothing from each other).

They write rows directly, the way runs.worker.persistence would, so page tests need no
runtime and no worker.
"""
from __future__ import annotations

import itertools
from datetime import timedelta

import pytest

_seq = itertools.count(1)


@pytest.fixture
def make_capability(db):
    from capabilities.models import Capability, CapabilityVersion

    def make(name="search_documents", *, kind="python", **policy):
        # The registry may already hold the bundled demo capabilities: add a version then.
        capability, _ = Capability.objects.get_or_create(name=name, defaults={"kind": kind})
        number = (capability.versions.order_by("-number").values_list("number", flat=True).first() or 0) + 1
        version = CapabilityVersion.objects.create(capability=capability, number=number, **policy)
        capability.current_version = version
        capability.save(update_fields=["current_version", "updated_at"])
        return version

    return make


@pytest.fixture
def make_run(db, operator):
    from django.utils import timezone

    from runs.dashboard import rollup
    from runs.models import Run

    def make(*, owner=None, goal="Find the travel policy", status="running", stop_reason="", created_at=None,
             finished_at=None, budgets=None, **fields):
        if status in ("completed", "stopped", "cancelled") and not stop_reason:
            stop_reason = "completed" if status == "completed" else "cancelled" if status == "cancelled" else "stalled"
        now = timezone.now()
        if status in ("completed", "stopped", "cancelled") and finished_at is None:
            finished_at = now
        run = Run.objects.create(
            goal=goal, completion={"capability": "search_documents", "path": "documents.0.id", "equals": "POL-7"},
            budgets=budgets if budgets is not None else {"max_iterations": 10, "max_tool_calls": 20, "deadline_s": 60},
            planner=fields.pop("planner", "scripted"), owner=owner or operator, status=status,
            stop_reason=stop_reason, finished_at=finished_at, trace_id=f"trace{next(_seq):027d}",
            started_at=fields.pop("started_at", now - timedelta(seconds=5)), **fields)
        if created_at is not None:
            Run.objects.filter(pk=run.pk).update(created_at=created_at)
            run.created_at = created_at
        rollup.record_run_finished(run_id=run.pk)  # as runs.services.run_finish does; nothing for a live run
        return run

    return make


@pytest.fixture
def make_revision(db):
    from runs.models import PlanRevision

    def make(run, *, number=1, accepted=True, steps=None, reason_code="initial", **fields):
        steps = steps if steps is not None else [
            {"id": "s1", "capability": "search_documents", "arguments": {"q": "travel"}, "expected_outcome": "found",
             "depends_on": []}]
        return PlanRevision.objects.create(run=run, number=number, accepted=accepted, steps=steps,
                                           reason_code=reason_code, **fields)

    return make


@pytest.fixture
def make_step(db):
    from runs.models import Step

    def make(revision, *, index=0, key=None, capability="search_documents", arguments=None, version=None, **fields):
        return Step.objects.create(run=revision.run, revision=revision, index=index, key=key or f"s{index + 1}",
                                   capability_name=capability, capability_version=version,
                                   arguments=arguments if arguments is not None else {"q": "travel"},
                                   arguments_hash=fields.pop("arguments_hash", f"argshash{index}"), **fields)

    return make


@pytest.fixture
def make_attempt(db):
    from django.utils import timezone

    from runs.dashboard import rollup
    from runs.models import Attempt, Decision

    def make(step, *, number=1, status="ok", error_code="", signature_hash=None, started_at=None, latency_s=0.2,
             decision="continue", decision_reason="The step succeeded; continue.", **fields):
        started = started_at or timezone.now()
        if status != "ok" and not error_code:
            error_code = "timeout"
        attempt = Attempt.objects.create(
            run=step.run, step=step, uid=fields.pop("uid", f"a{next(_seq):08d}"), number=number,
            capability_name=step.capability_name,
            signature=fields.pop("signature", f'{step.capability_name}:{{"q":"travel"}}'),
            signature_hash=signature_hash or f"sig{next(_seq)}", started_at=started,
            ended_at=started + timedelta(seconds=latency_s), latency_s=latency_s, status=status,
            error_code=error_code, error_category=fields.pop("error_category", "transient" if error_code else ""),
            trace_id=step.run.trace_id, span_id=f"span{next(_seq):012d}", **fields)
        if decision:
            Decision.objects.create(run=step.run, attempt=attempt, decision=decision, reason=decision_reason,
                                    usage={"tool_calls": number, "tokens": 100})
        # Factories add attempts after their run was made finished: count them as its finish would have.
        rollup.record_attempts(Attempt.objects.filter(pk=attempt.pk))
        return attempt

    return make


@pytest.fixture
def make_approval(db):
    from django.utils import timezone

    from runs.models import Approval

    def make(run, *, revision, step=None, kind="step", arguments=None, **fields):
        return Approval.objects.create(
            run=run, kind=kind, revision=revision, step=step,
            capability_name=step.capability_name if step else "",
            arguments=arguments if arguments is not None else (step.arguments if step else {}),
            arguments_hash=fields.pop("arguments_hash", step.arguments_hash if step else ""),
            plan_hash=fields.pop("plan_hash", "" if step else "planhash1"),
            expires_at=fields.pop("expires_at", timezone.now() + timedelta(hours=1)), **fields)

    return make


@pytest.fixture
def traced_run(make_run, make_revision, make_step, make_attempt, make_capability):
    """A stopped run: a timeout retried, then the planner repeats the same failing call."""
    version = make_capability("search_documents", timeout_s=2)
    run = make_run(status="stopped", stop_reason="stalled", stop_detail="The same search failed twice.",
                   tool_calls=3, iterations=5, revisions=1)
    rev1 = make_revision(run, number=1)
    s1 = make_step(rev1, version=version)
    make_attempt(s1, number=1, status="retryable", error_code="timeout", signature_hash="same", decision="retry")
    make_attempt(s1, number=2, status="ok", signature_hash="other", output={"documents": []}, decision="replan")
    rev2 = make_revision(run, number=2, reason_code="result_not_found", reason="Nothing found; search again.",
                         steps=[{"id": "s1", "capability": "search_documents", "arguments": {"q": "travel policy"}},
                                {"id": "s2", "capability": "create_ticket", "arguments": {"title": "x"}}])
    s2 = make_step(rev2, version=version)
    stop = make_attempt(s2, number=1, status="retryable", error_code="timeout", signature_hash="same",
                        repeated_without_progress=True, decision="stop_stalled")
    run.stop_attempt = stop
    run.save(update_fields=["stop_attempt"])
    return run
