"""The Django-backed demo capabilities, run through the python executor.

The executor calls functions in a worker thread with its own database
connection, so these tests commit for real (transaction=True).
"""
from __future__ import annotations

import pytest

from capabilities.demo import functions
from capabilities.kinds.python.executor import PythonExecutor
from capabilities.kinds.python.registry import CallContext
from runtime.observation import ErrorCode, SideEffectStatus, Status

pytestmark = pytest.mark.django_db(transaction=True)


def spec(function):
    return function.__capability__.to_spec()


@pytest.fixture
def executor(tmp_path):
    return PythonExecutor()


def run(executor, function, arguments, key=None):
    return executor.execute(spec(function), arguments, idempotency_key=key, timeout_s=5, trace_id="", span_id="")


def test_it_creates_one_ticket_per_idempotency_key(executor):
    from capabilities.models import Ticket

    first = run(executor, functions.create_ticket, {"title": "VPN down", "body": "Since 9am"}, key="run-1:step-1")
    again = run(executor, functions.create_ticket, {"title": "VPN down", "body": "Since 9am"}, key="run-1:step-1")
    assert first.status == Status.OK
    assert first.side_effect == SideEffectStatus.COMMITTED and first.state_changed
    assert again.output["ticket_id"] == first.output["ticket_id"]
    assert Ticket.objects.count() == 1
    assert Ticket.objects.get().status == "open"


def test_the_ticket_status_lookup_tells_whether_the_key_committed(executor):
    run(executor, functions.create_ticket, {"title": "Printer jam"}, key="key-a")
    found = executor.lookup_status(spec(functions.create_ticket), {"title": "Printer jam"},
                                   idempotency_key="key-a", timeout_s=5)
    missing = executor.lookup_status(spec(functions.create_ticket), {"title": "Printer jam"},
                                     idempotency_key="key-b", timeout_s=5)
    assert found.side_effect == SideEffectStatus.COMMITTED
    assert found.output["title"] == "Printer jam"
    assert missing.side_effect == SideEffectStatus.NOT_COMMITTED


def test_an_empty_ticket_title_is_invalid(executor):
    observation = run(executor, functions.create_ticket, {"title": "  "}, key="k")
    assert observation.error_code == ErrorCode.INVALID_ARGUMENTS
    assert observation.side_effect == SideEffectStatus.NOT_COMMITTED


def test_it_polls_a_ticket_until_it_is_resolved(executor):
    from django.utils import timezone

    from capabilities.models import Ticket

    ticket_id = run(executor, functions.create_ticket, {"title": "Laptop"}, key="k1").output["ticket_id"]
    assert run(executor, functions.get_ticket_status, {"ticket_id": ticket_id}).output["status"] == "open"
    Ticket.objects.filter(pk=ticket_id).update(status="resolved", resolved_at=timezone.now())
    resolved = run(executor, functions.get_ticket_status, {"ticket_id": ticket_id}).output
    assert resolved["status"] == "resolved" and resolved["resolved_at"]
    assert spec(functions.get_ticket_status).polling.max_attempts == 10


def test_an_unknown_ticket_is_not_found(executor):
    assert run(executor, functions.get_ticket_status, {"ticket_id": 987654}).error_code == ErrorCode.NOT_FOUND


def test_it_queues_one_notification_per_idempotency_key(executor):
    from capabilities.models import OutboxMessage

    arguments = {"channel": "email", "recipient": "ops@example.com", "message": "Ticket opened"}
    first = run(executor, functions.send_notification, arguments, key="notify-1")
    again = run(executor, functions.send_notification, arguments, key="notify-1")
    assert first.output["message_id"] == again.output["message_id"]
    assert OutboxMessage.objects.count() == 1
    assert first.side_effect == SideEffectStatus.COMMITTED
    lookup = executor.lookup_status(spec(functions.send_notification), arguments, idempotency_key="notify-1",
                                    timeout_s=5)
    assert lookup.output["recipient"] == "ops@example.com"


def test_a_notification_on_an_unknown_channel_is_refused_by_the_schema(executor):
    observation = run(executor, functions.send_notification,
                      {"channel": "fax", "recipient": "x", "message": "y"}, key="k")
    assert observation.error_code == ErrorCode.INVALID_ARGUMENTS


def test_the_notification_policy_requires_approval():
    notification = spec(functions.send_notification)
    assert notification.requires_approval and notification.idempotent and notification.status_lookup
    assert notification.side_effect.value == "external"


def test_the_functions_can_be_called_directly():
    result = functions.create_ticket("Direct", context=CallContext(idempotency_key="direct-1"))
    assert result["title"] == "Direct"


@pytest.mark.parametrize("function, arguments, model", [
    (functions.create_ticket, {"title": "VPN down"}, "Ticket"),
    (functions.send_notification, {"channel": "email", "recipient": "ops@example.com", "message": "VPN down"},
     "OutboxMessage"),
])
def test_a_late_call_of_a_worker_whose_run_was_taken_over_changes_nothing(executor, operator, function, arguments,
                                                                          model):
    """A worker paused past its lease wakes and finishes its call after another worker took the run
    over: the call carries the run's real fence (runs.worker.adapters), and the capability's
    commit_fenced refuses it inside the write's transaction."""
    from datetime import timedelta

    from django.apps import apps
    from django.utils import timezone

    from runs.models import Run
    from runs.worker import leases
    from runs.worker.adapters import FencedExecutor

    rows = apps.get_model("capabilities", model).objects
    run_ = Run.objects.create(goal="Tell ops", owner=operator, status="running", planner="scripted",
                              completion={"capability": "search_documents", "path": "documents", "exists": True},
                              budgets={"deadline_s": 60})
    zombie = leases.claim(run_.pk, "zombie@host")
    Run.objects.filter(pk=run_.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))   # paused past it
    taker = leases.claim(run_.pk, "taker@host")
    assert zombie is not None and taker is not None and taker.token > zombie.token

    def call(lease, attempt):
        return FencedExecutor(executor, lease).execute(spec(function), arguments, attempt=attempt, timeout_s=5,
                                                       idempotency_key=f"run-{run_.pk}:s1", trace_id="", span_id="")

    late = call(zombie, 1)
    assert (late.error_code, late.side_effect) == (ErrorCode.CONFLICT, SideEffectStatus.NOT_COMMITTED)
    assert "taken over" in late.error_message and not rows.exists()
    sent = call(taker, 2)
    assert sent.side_effect == SideEffectStatus.COMMITTED and rows.count() == 1
    later = call(zombie, 1)   # landing after the taker's commit: refused before it reads or writes
    assert later.error_code == ErrorCode.CONFLICT and later.output is None and rows.count() == 1
