"""Side effects exactly once through a real worker, counted in a ledger outside the product.

The seed's central case: a non-idempotent send with a status lookup whose effect lands after
its timeout. No fault at all (the call's thread goes on after the timeout), and a worker
SIGSTOPped mid-call past its lease, taken over, then resumed. Effects are counted per item
in tests/chaos/chaos_ledger.py's fsync'd ledger (its path in the workers' CHAOS_LEDGER), not
by idempotency key. Runs on whichever stack the environment selects.
"""
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from capabilities.models import Capability
from runs import services
from runs.models import Attempt, Decision, Run
from runs.worker import queue

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
CHAOS_DIR = ROOT / "tests" / "chaos"
if str(CHAOS_DIR) not in sys.path:
    sys.path.insert(0, str(CHAOS_DIR))

from aimed_faults import LEDGER_MCP_COMMAND, RowLocked, answers, post_quietly, register_ledger_mcp, start_web  # noqa: E402
from chaos_ledger import effects_by_item, read_ledger  # noqa: E402


@pytest.fixture
def ledger(db, worker_env):
    from capabilities.kinds.python.sync import python_capabilities_sync

    python_capabilities_sync(modules=("chaos_ledger",))
    assert Capability.objects.filter(name="ledger_late").exists()
    return worker_env["CHAOS_LEDGER"]


@pytest.fixture
def taker(worker_env):
    """A second real worker, started when a test asks for it (with `env`, instead of the session's)."""
    procs = []

    def start(env=None):
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "agentops", "worker", "--pool", "threads", "--concurrency", "4",
             "--loglevel", "WARNING", "--without-mingle", "--without-gossip", "--hostname", f"taker-{os.getpid()}@%h"],
            cwd=ROOT, env=env or worker_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def item(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"   # the ledger is shared by the session's worker


def send(owner, capability, name, seconds=3.0):
    return services.run_start(
        owner=owner, goal=f"Send {name} once", planner="scripted",
        planner_config={"plans": [[{"capability": capability, "arguments": {"item": name, "seconds": seconds}}]]},
        completion={"capability": capability, "path": "receipt", "exists": True},
        budgets={"deadline_s": 120, "max_retries": 3})


def finished(run_id):
    run = Run.objects.get(pk=run_id)
    return run if run.is_finished else None


def received(ledger, name):
    return [r for r in read_ledger(ledger) if r["kind"] == "received" and r["item"] == name]


def effects(ledger, capability, names):
    counts = effects_by_item(ledger, capability)
    return {name: counts.get(name, 0) for name in names}


def test_a_send_whose_effect_lands_after_its_timeout_makes_one_effect_per_item(celery_worker, ledger, operator,
                                                                                wait_until):
    late = {item("late"): None for _ in range(3)}
    twins = {item("twin"): None for _ in range(3)}
    runs = [send(operator, "ledger_late", name) for name in late] + \
           [send(operator, "ledger_late_idempotent", name) for name in twins]
    for run in runs:
        wait_until(lambda run=run: finished(run.pk), timeout=90, message=f"run {run.pk} to finish")
    assert effects(ledger, "ledger_late", late) == {name: 1 for name in late}
    assert effects(ledger, "ledger_late_idempotent", twins) == {name: 1 for name in twins}
    for run in runs[:3]:
        run.refresh_from_db()
        assert run.stop_reason == "completed", run.stop_detail
        kinds = list(Attempt.objects.filter(run=run).order_by("started_at").values_list("kind", "side_effect_status"))
        # The call timed out with its outcome unknown; the lookup, made once the call had ended, found it.
        assert kinds == [("call", "unknown"), ("lookup", "committed")]
    for run in runs[3:]:
        run.refresh_from_db()
        assert run.stop_reason == "completed", run.stop_detail


def test_a_worker_paused_past_its_lease_cannot_land_its_call_beside_the_taker(celery_worker, ledger, taker, operator,
                                                                              wait_until):
    name = item("paused")
    run = send(operator, "ledger_late_fenced", name, seconds=3.0)
    first = wait_until(lambda: received(ledger, name), timeout=60, message="the call to arrive")[0]
    assert first["pid"] == celery_worker.pid
    os.kill(celery_worker.pid, signal.SIGSTOP)
    try:
        taker()
        # Paused past its lease: the lease lapses (as 14 s of SIGSTOP would let it) and the sweep re-sends.
        Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))

        def taken_over():
            queue.advance_later(run.pk)
            owner = Run.objects.values_list("lease_owner", flat=True).get(pk=run.pk)
            return owner.startswith("taker") or finished(run.pk)

        wait_until(taken_over, timeout=60, interval=1.0, message="the other worker to take the run over")
        wait_until(lambda: len(received(ledger, name)) >= 2, timeout=60, message="the taker's re-send")
    finally:
        os.kill(celery_worker.pid, signal.SIGCONT)   # the zombie wakes: its call finishes and tries to commit
    wait_until(lambda: finished(run.pk), timeout=90, message="the run to finish")
    time.sleep(4)   # the zombie's call (3 s) has had every chance to land
    run.refresh_from_db()
    assert run.stop_reason == "completed", run.stop_detail
    assert effects(ledger, "ledger_late_fenced", [name]) == {name: 1}
    calls = received(ledger, name)
    assert len(calls) == 2 and calls[0]["fence"] != calls[1]["fence"]   # the zombie's call and the taker's
    # The trace is truthful: the lost call was looked up and found not committed, and it never committed.
    attempts = list(Attempt.objects.filter(run=run).order_by("started_at").values_list("kind", "side_effect_status"))
    assert attempts[0] == ("call", "unknown") and attempts[-1][1] == "committed", attempts
    assert ("lookup", "not_committed") in attempts, attempts


def test_a_cancel_during_the_last_call_is_recorded_and_stops_the_run_cancelled(celery_worker, ledger, operator,
                                                                              wait_until):
    name = item("cancel")
    run = services.run_start(
        owner=operator, goal="A long last call", planner="scripted",
        planner_config={"plans": [[{"capability": "ledger_slow", "arguments": {"item": name, "seconds": 4}}]]},
        completion={"capability": "ledger_slow", "path": "receipt", "exists": True}, budgets={"deadline_s": 120})
    wait_until(lambda: Attempt.objects.filter(run=run, in_flight=True).exists(), timeout=60,
               message="the call in flight")
    services.run_cancel(run_id=run.pk, user=operator)
    run.refresh_from_db()
    assert run.cancel_requested_at is not None and not run.is_finished   # recorded at once, the call goes on
    wait_until(lambda: finished(run.pk), timeout=60, message="the run to stop")
    run.refresh_from_db()
    assert run.status == "cancelled" and run.stop_reason == "cancelled"
    assert "in flight" in run.stop_detail
    attempt = Attempt.objects.get(run=run)
    assert attempt.status == "ok" and attempt.side_effect_status == "committed"   # its observation is recorded
    assert Decision.objects.get(attempt=attempt).decision == "stop_cancelled"
    assert effects(ledger, "ledger_slow", [name]) == {name: 1}


def test_a_worker_killed_during_an_mcp_stdio_call_leaves_one_effect(ledger, taker, own_task_queue, settings,
                                                                    stdio_allowed, operator, wait_until,
                                                                    monkeypatch, worker_env):
    monkeypatch.setenv("PYTHONPATH", worker_env["PYTHONPATH"])   # importing the tools starts the server here
    monkeypatch.setenv("CHAOS_LEDGER", ledger)

    settings.AGENTOPS_MCP_STDIO_COMMANDS = [LEDGER_MCP_COMMAND]
    register_ledger_mcp(stdio_allowed)
    # Only workers of this test take the run: its tasks go to a queue of the test's own.
    first = taker(own_task_queue.env)
    name = item("mcp")
    run = services.run_start(
        owner=operator, goal="Write through MCP", planner="scripted",
        planner_config={"plans": [[{"capability": "ledger_mcp", "arguments": {"item": name, "seconds": 3}}]]},
        completion={"capability": "ledger_mcp", "path": "item", "equals": name}, budgets={"deadline_s": 120})
    arrived = wait_until(lambda: received(ledger, name), timeout=60, message="the MCP call to arrive")[0]
    assert arrived["parent"] == first.pid   # the stdio server is the worker's child
    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=10)
    second = taker(own_task_queue.env)
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))

    def done():
        queue.advance_later(run.pk)   # the orphan sweep's re-send
        return finished(run.pk)

    wait_until(done, timeout=90, interval=1.0, message="the second worker to finish the run")
    time.sleep(4)   # an orphaned server's call (3 s) has had every chance to land
    run.refresh_from_db()
    assert run.stop_reason == "completed", run.stop_detail
    assert effects(ledger, "ledger_mcp_write", [name]) == {name: 1}
    kinds = list(Attempt.objects.filter(run=run).order_by("started_at").values_list("kind", "side_effect_status"))
    assert kinds[0] == ("call", "unknown") and kinds[-1][1] == "committed", kinds   # the lost call, re-sent by key
    assert second.poll() is None


def test_a_web_process_killed_inside_an_approval_post_decides_nothing_and_loses_nothing(
        celery_worker, ledger, worker_env, operator, second_operator, wait_until):

    from core.tokens import token_create
    from runs.models import Approval

    name = item("approved")
    run = services.run_start(
        owner=operator, goal="Write once approved", planner="scripted",
        planner_config={"plans": [[{"capability": "ledger_approved", "arguments": {"item": name}}]]},
        completion={"capability": "ledger_approved", "path": "item", "equals": name}, budgets={"deadline_s": 300})
    approval = wait_until(lambda: Approval.objects.filter(run=run, state="pending").first(), timeout=60,
                          message="the approval request")
    _, key = token_create(user=second_operator, name="decider")
    web, url = start_web(worker_env)
    wait_until(lambda: answers(f"{url}/healthz"), timeout=60, interval=0.5, message="the web process")
    with RowLocked(run.pk):
        posted = threading.Thread(target=lambda: post_quietly(
            f"{url}/api/approvals/{approval.pk}/decide/", key,
            {"decision": "approve", "expected_hash": approval.arguments_hash}), daemon=True)
        posted.start()
        time.sleep(2)                                   # the POST is now inside its transaction, waiting
        os.kill(web.pid, signal.SIGKILL)
        web.wait(timeout=10)
    approval.refresh_from_db()
    run.refresh_from_db()
    assert approval.state == "pending" and approval.decided_by is None   # nothing half-decided
    assert run.status == "awaiting_approval"
    # The operator decides again (the page or the API of a web process restarted): the run resumes once.
    services.approval_decide(approval_id=approval.pk, user=second_operator, approve=True,
                             expected_hash=approval.arguments_hash, channel="api")
    wait_until(lambda: finished(run.pk), timeout=90, message="the run to finish")
    run.refresh_from_db()
    assert run.stop_reason == "completed", run.stop_detail
    assert effects(ledger, "ledger_approved", [name]) == {name: 1}

