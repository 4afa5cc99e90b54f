"""Fenced leases, write-ahead intents and nothing stranded, through the real adapter (no worker)."""
import threading
import time
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from capabilities.models import Capability, CapabilityVersion, Ticket
from runs import checkpoint, services
from runs.models import Approval, Attempt, Run
from runs.worker import adapters, engine, leases, sweeps
from runs.worker.persistence import PassWriter
from runtime.intents import LeaseLost
from tests.binding import bound_hash

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def demo_capabilities(db, manual_advance):
    from capabilities.kinds.python.sync import python_capabilities_sync

    python_capabilities_sync()
    CapabilityVersion.objects.filter(capability__name="get_ticket_status").update(polling_interval_s=0.01)
    # Edited in place, so the registry's version is moved as capabilities.policy moves it: workers
    # keep the specs they read at one version.
    Capability.objects.filter(name="get_ticket_status").update(updated_at=timezone.now())


def start(owner, steps, completion):
    return services.run_start(owner=owner, goal="durability", completion=completion, budgets={"deadline_s": 120},
                              planner="scripted", planner_config={"plans": [steps]})


def ticket_run(owner):
    return start(owner, [{"capability": "create_ticket", "arguments": {"title": "Printer on fire"}}],
                 {"capability": "create_ticket", "path": "ticket_id", "exists": True})


def expire_lease(run_id):
    Run.objects.filter(pk=run_id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))


class Slice:
    """One worker's slice, driven pass by pass the way engine.run_advance drives it."""

    def __init__(self, run_id, worker):
        self.lease = leases.claim(run_id, worker)
        assert self.lease is not None
        run = Run.objects.get(pk=run_id)
        self.writer = PassWriter(run, self.lease)
        self.writer.load_interrupted()
        self.controller = adapters.build_controller(run, self.writer)
        self.state = checkpoint.load(run)
        self.writer.previous = self.state

    def advance(self):
        return self.controller.advance(self.state)

    def write(self, transition):
        with transaction.atomic():
            self.writer.write(transition)
        self.state = transition.state


@pytest.mark.slow
class TestTheLeaseRenewer:
    """One thread per worker process renews the lease of every slice it advances, while the slice's own
    thread is busy (blocked in a long call, say), and marks a lease another worker took over as lost."""

    def test_held_leases_stay_renewed_and_a_taken_one_turns_lost(self, operator, demo_capabilities, settings):
        settings.AGENTOPS_RUN_LEASE_SECONDS = 3  # renewed every second
        first, second = ticket_run(operator), ticket_run(operator)
        keepers = [leases.LeaseKeeper(leases.claim(run.pk, f"w{n}")) for n, run in enumerate((first, second))]
        for keeper in keepers:
            keeper.start()
        try:
            initial = {run.pk: Run.objects.get(pk=run.pk).lease_expires_at for run in (first, second)}
            time.sleep(1.6)  # past one interval, while no pass is written
            for run in (first, second):
                assert Run.objects.get(pk=run.pk).lease_expires_at > initial[run.pk]
            expire_lease(second.pk)
            assert leases.claim(second.pk, "another worker")
            deadline = time.monotonic() + 5
            while not keepers[1].lost and time.monotonic() < deadline:
                time.sleep(0.05)
            assert keepers[1].lost and not keepers[0].lost
            assert Run.objects.get(pk=second.pk).lease_owner == "another worker"
        finally:
            for keeper in keepers:
                keeper.stop()
        names = [thread.name for thread in threading.enumerate()]
        assert names.count("lease-renewer") == 1 and sum(name.startswith("lease-") for name in names) == 1

    def test_a_forked_child_starts_afresh_without_its_parent_s_leases(self, operator, demo_capabilities):
        """A worker pool that forks (prefork) gets a renewer of its own in each child: not the parent's
        thread, leases or lock (which the parent's thread may have held at the fork)."""
        import os

        parent = leases.LeaseKeeper(leases.Lease(run_id=1, worker="parent", token=1))
        parent.start()
        try:
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: report what it inherited, hold a lease of its own, leave at once
                renewer = leases._RENEWER
                inherited = len(renewer._held) + (renewer._thread is not None)
                child = leases.LeaseKeeper(leases.Lease(run_id=2, worker="child", token=1))
                child.start()
                started = renewer._thread is not None and renewer._thread.is_alive() and renewer._held == {child}
                os.write(write, f"{inherited} {started}".encode())
                os._exit(0)
            os.close(write)
            assert os.waitpid(pid, 0)[1] == 0
            assert os.read(read, 100).decode() == "0 True"
            os.close(read)
        finally:
            parent.stop()

    def test_a_stopped_keeper_is_renewed_no_more(self, operator, demo_capabilities, settings):
        settings.AGENTOPS_RUN_LEASE_SECONDS = 3
        run = ticket_run(operator)
        keeper = leases.LeaseKeeper(leases.claim(run.pk, "w"))
        keeper.start()
        keeper.stop()
        before = Run.objects.get(pk=run.pk).lease_expires_at
        time.sleep(1.3)
        assert Run.objects.get(pk=run.pk).lease_expires_at == before and not keeper.lost


class TestFencedLeases:
    def test_every_claim_raises_the_token(self, operator, demo_capabilities):
        run = ticket_run(operator)
        first = leases.claim(run.pk, "a")
        expire_lease(run.pk)
        second = leases.claim(run.pk, "b")
        assert second.token == first.token + 1

    def test_the_heartbeat_renews_only_a_lease_still_held(self, operator, demo_capabilities):
        run = ticket_run(operator)
        lease = leases.claim(run.pk, "a")
        Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() + timedelta(seconds=1))
        assert leases.renew(lease)
        assert Run.objects.get(pk=run.pk).lease_expires_at > timezone.now() + timedelta(seconds=5)
        expire_lease(run.pk)
        assert leases.claim(run.pk, "b")
        assert not leases.renew(lease)

    def test_a_redelivered_copy_cannot_reclaim_its_own_live_lease(self, operator, demo_capabilities):
        run = ticket_run(operator)
        assert leases.claim(run.pk, "host:task-1")
        assert leases.claim(run.pk, "host:task-1") is None

    def test_a_worker_that_lost_its_lease_writes_nothing(self, operator, demo_capabilities):
        run = start(operator, [{"capability": "search_documents", "arguments": {"q": "travel"}}],
                    {"capability": "search_documents", "path": "documents.0.id", "exists": True})
        stale = Slice(run.pk, "stale")
        transition = stale.advance()                      # the plan pass, computed but not yet written
        expire_lease(run.pk)
        assert leases.claim(run.pk, "new-owner")          # someone else takes over meanwhile
        with pytest.raises(LeaseLost):
            stale.write(transition)
        run.refresh_from_db()
        assert run.revisions == 0 and not run.plan_revisions.exists() and run.lease_owner == "new-owner"

    def test_a_cancel_made_during_a_call_survives_the_pass(self, operator, demo_capabilities):
        ticket = Ticket.objects.create(idempotency_key="k-open", title="never resolved")
        run = start(operator, [{"capability": "get_ticket_status", "arguments": {"ticket_id": ticket.pk}}],
                    {"capability": "get_ticket_status", "path": "status", "equals": "resolved"})
        worker = Slice(run.pk, "w")
        worker.write(worker.advance())                    # plan
        transition = worker.advance()                     # the call has been made...
        services.run_cancel(run_id=run.pk, user=operator)  # ...and the operator cancels before it is recorded
        worker.write(transition)
        assert Run.objects.get(pk=run.pk).cancel_requested_at is not None
        assert worker.writer.cancel_requested           # read back by the pass's own UPDATE ... RETURNING
        leases.release(worker.lease)
        engine.run_advance(run_id=run.pk, worker="w2")
        run.refresh_from_db()
        assert run.status == "cancelled" and run.stop_reason == "cancelled"


class TestWriteAheadIntents:
    def approved_ticket_run(self, operator, second_operator):
        run = ticket_run(operator)
        engine.run_advance(run_id=run.pk, worker="w")
        approval = Approval.objects.get(run=run, state="pending")
        services.approval_decide(approval_id=approval.pk, user=second_operator, approve=True,
                                 channel="api", expected_hash=bound_hash(approval.pk))
        return run

    def test_the_intent_is_committed_before_the_call_and_completed_after(self, operator, second_operator,
                                                                        demo_capabilities):
        run = self.approved_ticket_run(operator, second_operator)
        engine.run_advance(run_id=run.pk, worker="w")
        attempt = Attempt.objects.get(run=run)
        assert not attempt.in_flight and attempt.status == "ok" and attempt.side_effect_status == "committed"
        assert attempt.worker == "w" and attempt.lease_token == Run.objects.get(pk=run.pk).lease_token
        assert attempt.signature and attempt.idempotency_key

    def test_a_worker_lost_mid_call_is_resumed_by_re_sending_with_the_same_key(self, operator, second_operator,
                                                                            demo_capabilities):
        run = self.approved_ticket_run(operator, second_operator)
        lost = Slice(run.pk, "lost")
        lost.advance()  # takes the approval and calls create_ticket; the worker dies before recording it
        row = Attempt.objects.get(run=run)
        assert row.in_flight and row.side_effect_status == "unknown" and row.worker == "lost"
        assert Ticket.objects.count() == 1
        expire_lease(run.pk)
        engine.run_advance(run_id=run.pk, worker="next")
        run.refresh_from_db()
        assert run.status == "completed"
        assert Ticket.objects.count() == 1                # deduplicated by the key: one real ticket
        attempts = list(Attempt.objects.filter(run=run).order_by("number"))
        assert [a.kind for a in attempts] == ["call", "resolve"]
        assert attempts[0].uid == row.uid and not attempts[0].in_flight
        assert attempts[0].side_effect_status == "unknown"
        assert {a.idempotency_key for a in attempts} == {row.idempotency_key}

    def test_a_run_that_ends_with_an_intent_unresolved_keeps_it_as_unknown(self, operator, second_operator,
                                                                         demo_capabilities):
        run = self.approved_ticket_run(operator, second_operator)
        Slice(run.pk, "lost").advance()
        services.run_cancel(run_id=run.pk, user=operator)
        expire_lease(run.pk)
        engine.run_advance(run_id=run.pk, worker="next")
        attempt = Attempt.objects.get(run=run)
        assert Run.objects.get(pk=run.pk).status == "cancelled"
        assert not attempt.in_flight and attempt.side_effect_status == "unknown"

    def test_an_intent_stored_though_its_commit_failed_is_withdrawn_and_the_call_made_once(
            self, operator, second_operator, demo_capabilities, monkeypatch):
        """The worker is told the intent's commit failed (it was stored: the acknowledgement was lost), so it
        never sends the call; it withdraws the intent, and the run's next slice makes the call afresh instead
        of resolving a call in flight that never happened. tests/gateway/test_commit_lost.py cuts the real
        commit on the wire."""
        from django.db import OperationalError

        run = self.approved_ticket_run(operator, second_operator)
        stored = PassWriter._begin

        def stored_then_failed(writer, intent, until):
            stored(writer, intent, until)
            raise OperationalError("server closed the connection unexpectedly")

        monkeypatch.setattr(PassWriter, "_begin", stored_then_failed)
        with pytest.raises(OperationalError):
            engine.run_advance(run_id=run.pk, worker="w")
        assert not Attempt.objects.filter(run=run).exists() and Ticket.objects.count() == 0
        monkeypatch.setattr(PassWriter, "_begin", stored)
        expire_lease(run.pk)
        engine.run_advance(run_id=run.pk, worker="next")
        attempt = Attempt.objects.get(run=run)
        assert Run.objects.get(pk=run.pk).status == "completed"
        assert attempt.number == 1 and attempt.status == "ok" and Ticket.objects.count() == 1

    def test_an_intent_the_worker_could_not_withdraw_stays_in_flight(self, operator, second_operator,
                                                                   demo_capabilities, monkeypatch):
        """The database still fails when the worker tries to withdraw it: the intent stays, resolved as a call
        in flight (never sent twice)."""
        from django.db import OperationalError

        run = self.approved_ticket_run(operator, second_operator)
        stored = PassWriter._begin

        def stored_then_failed(writer, intent, until):
            stored(writer, intent, until)
            monkeypatch.setattr(leases, "fenced_update", _failing)   # the withdrawal's fence fails too
            raise OperationalError("server closed the connection unexpectedly")

        monkeypatch.setattr(PassWriter, "_begin", stored_then_failed)
        with pytest.raises(OperationalError):
            engine.run_advance(run_id=run.pk, worker="w")
        assert Attempt.objects.get(run=run).in_flight


def _failing(*args, **kwargs):
    from django.db import OperationalError

    raise OperationalError("the database is still down")


class TestNothingStranded:
    @pytest.fixture(autouse=True)
    def requeued(self, monkeypatch):
        """What the sweep queues, kept here: the session's real worker (if one was started) must not
        advance these runs while the test's transactional teardown truncates the tables."""
        sent = []
        monkeypatch.setattr(sweeps.queue, "advance_later", lambda run_id, countdown=None: sent.append(run_id))
        return sent

    def test_deciding_an_approval_moves_the_run_out_of_awaiting_approval(self, operator, second_operator,
                                                                         demo_capabilities):
        run = ticket_run(operator)
        engine.run_advance(run_id=run.pk, worker="w")
        assert Run.objects.get(pk=run.pk).status == "awaiting_approval"
        approval = Approval.objects.get(run=run, state="pending")
        services.approval_decide(approval_id=approval.pk, user=second_operator, approve=True,
                                 channel="api", expected_hash=bound_hash(approval.pk))
        assert Run.objects.get(pk=run.pk).status == "queued"

    def test_the_sweep_requeues_an_approved_run_whose_wake_up_was_lost(self, operator, second_operator,
                                                                       demo_capabilities, requeued):
        run = ticket_run(operator)
        engine.run_advance(run_id=run.pk, worker="w")
        approval = Approval.objects.get(run=run, state="pending")
        services.approval_decide(approval_id=approval.pk, user=second_operator, approve=True,
                                 channel="api", expected_hash=bound_hash(approval.pk))
        later = timezone.now() + timedelta(seconds=sweeps.queue.visibility_timeout_s() + 5)
        assert sweeps.requeue_orphaned_runs(now=later) == 1 and requeued == [run.pk]

    def test_the_sweep_requeues_a_run_left_awaiting_an_approval_already_decided(self, operator, second_operator,
                                                                               demo_capabilities, requeued):
        run = ticket_run(operator)
        engine.run_advance(run_id=run.pk, worker="w")
        approval = Approval.objects.get(run=run, state="pending")
        services.approval_decide(approval_id=approval.pk, user=second_operator, approve=True,
                                 channel="api", expected_hash=bound_hash(approval.pk))
        # As a run decided before this release would be: still awaiting_approval.
        Run.objects.filter(pk=run.pk).update(status="awaiting_approval",
                                             updated_at=timezone.now() - timedelta(seconds=5))
        assert sweeps.requeue_orphaned_runs() == 1 and requeued == [run.pk]
        assert Run.objects.get(pk=run.pk).status == "queued"
