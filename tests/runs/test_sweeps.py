"""The orphan sweep's rule: a run waiting its turn in the broker is left alone; a lost task is sent again, once.

Rows are shaped as of some time ago and the sweep runs at the real time, as the sends it makes
are recorded at the real time.
"""
from datetime import timedelta

import pytest
from django.utils import timezone

from runs.models import Run
from runs.worker import queue, sweeps

pytestmark = pytest.mark.django_db


@pytest.fixture
def sent(monkeypatch):
    """Tasks reach no broker here; advance_later still records each send, as in production."""
    from runs import tasks

    calls = []
    monkeypatch.setattr(tasks.advance_run, "apply_async", lambda args, **kw: calls.append(args[0]))
    return calls


@pytest.fixture
def queued_run(make_run):
    def make(*, sent_s_ago, **fields):
        run = make_run(status="queued", started_at=None)
        long_ago = timezone.now() - timedelta(minutes=10)  # quiet: the rule for a run never sent would take it
        Run.objects.filter(pk=run.pk).update(updated_at=long_ago,
                                             task_sent_at=timezone.now() - timedelta(seconds=sent_s_ago), **fields)
        return run

    return make


def visibility_s() -> float:
    return queue.visibility_timeout_s()


def sent_at(run) -> timezone.datetime:
    return Run.objects.values_list("task_sent_at", flat=True).get(pk=run.pk)


class TestRequeueOrphanedRuns:
    def test_it_leaves_a_queued_run_waiting_its_turn_within_the_visibility_timeout(self, queued_run, sent):
        queued_run(sent_s_ago=visibility_s() - 5)
        assert sweeps.requeue_orphaned_runs() == 0 and sent == []

    def test_it_sends_again_once_a_task_nobody_claimed_within_the_visibility_timeout(self, queued_run, sent):
        run = queued_run(sent_s_ago=visibility_s() + 1)
        assert sweeps.requeue_orphaned_runs() == 1 and sent == [run.pk]
        assert timezone.now() - sent_at(run) < timedelta(seconds=5)  # the re-send is recorded...
        assert sweeps.requeue_orphaned_runs() == 0 and sent == [run.pk]  # ...so the next sweep waits again

    def test_it_leaves_a_claimed_run_with_a_live_lease_alone(self, queued_run, sent):
        queued_run(sent_s_ago=visibility_s() * 10, status="running", lease_owner="w", lease_token=1,
                   lease_expires_at=timezone.now() + timedelta(seconds=10))
        assert sweeps.requeue_orphaned_runs() == 0 and sent == []

    def test_it_sends_again_once_the_run_of_a_worker_that_died(self, queued_run, sent):
        # Sent 20 s ago, claimed, and the worker's lease ran out without a renewal: it is gone.
        run = queued_run(sent_s_ago=20, status="running", lease_owner="w", lease_token=1,
                         lease_expires_at=timezone.now() - timedelta(seconds=1))
        assert sweeps.requeue_orphaned_runs() == 1 and sent == [run.pk]
        assert sweeps.requeue_orphaned_runs() == 0 and sent == [run.pk]

    @pytest.mark.parametrize("planner", ["external", "gateway"])
    def test_an_agents_run_carrying_out_a_plan_whose_worker_is_gone_is_sent_again(self, queued_run, sent, planner):
        """Its call was in flight when the worker died or lost the database: a worker must conclude it."""
        run = queued_run(sent_s_ago=20, status="running", planner=planner, state={"planning": None},
                         lease_owner="w", lease_token=1, lease_expires_at=timezone.now() - timedelta(seconds=1))
        assert sweeps.requeue_orphaned_runs() == 1 and sent == [run.pk]

    @pytest.mark.parametrize("planner", ["external", "gateway"])
    def test_an_agents_run_waiting_for_its_agents_plan_is_left_to_the_agent(self, queued_run, sent, planner):
        queued_run(sent_s_ago=visibility_s() * 10, status="running", planner=planner,
                   state={"planning": {"revision": 2}, "usage": {"plans": 1}},
                   lease_owner="w", lease_token=1, lease_expires_at=timezone.now() - timedelta(seconds=1))
        assert sweeps.requeue_orphaned_runs() == 0 and sent == []

    def test_agents_runs_waiting_for_plans_never_hide_a_stranded_run_from_the_batch(self, queued_run, sent,
                                                                                     monkeypatch):
        monkeypatch.setattr(sweeps, "BATCH", 2)
        gone = {"status": "running", "lease_owner": "w", "lease_token": 1,
                "lease_expires_at": timezone.now() - timedelta(seconds=1)}
        for _ in range(3):  # idle for their agents' plans, and first in the table
            queued_run(sent_s_ago=visibility_s() * 10, planner="gateway",
                       state={"planning": {"revision": 2}, "usage": {"plans": 1}}, **gone)
        stranded = queued_run(sent_s_ago=20, planner="gateway", state={"planning": None}, **gone)
        never_advanced = queued_run(sent_s_ago=visibility_s() + 1, planner="external", state={})
        assert sweeps.requeue_orphaned_runs() == 2 and sorted(sent) == sorted([stranded.pk, never_advanced.pk])

    def test_a_countdown_counts_from_when_its_task_is_due(self, queued_run, sent):
        run = queued_run(sent_s_ago=visibility_s() * 10)
        queue.advance_later(run.pk, countdown=30)
        assert sent_at(run) > timezone.now() + timedelta(seconds=25)
        almost = timezone.now() + timedelta(seconds=visibility_s() + 25)
        assert sweeps.requeue_orphaned_runs(now=almost) == 0 and sent == [run.pk]
        assert sweeps.requeue_orphaned_runs(now=almost + timedelta(seconds=10)) == 1


class TestAdvanceLater:
    def test_a_database_that_cannot_record_the_send_does_not_stop_it(self, make_run, sent, monkeypatch):
        from django.db import OperationalError

        run = make_run(status="queued")

        def database_down(*args, **kwargs):
            raise OperationalError("the database system is shutting down")

        monkeypatch.setattr(queue.Run.objects, "filter", database_down)
        queue.advance_later(run.pk)
        assert sent == [run.pk]

    def test_it_never_moves_the_record_back_to_an_earlier_due_time(self, make_run, sent):
        run = make_run(status="running")
        queue.advance_later(run.pk, countdown=30)
        later = sent_at(run)
        queue.advance_later(run.pk)
        assert sent_at(run) == later and sent == [run.pk, run.pk]

    def test_the_sweeps_patience_is_the_brokers_visibility_timeout_on_either_broker(self, settings):
        assert visibility_s() == settings.TASK_VISIBILITY_TIMEOUT_S > settings.AGENTOPS_RUN_LEASE_SECONDS


class TestWakeRunsWithSubmittedPlans:
    """The safety net for a plan submitted while the worker finished the pass that found none."""

    def test_only_a_run_whose_awaited_plan_arrived_is_woken_in_one_query(self, queued_run, sent, operator,
                                                                          django_assert_max_num_queries):
        from runs.models import PlanSubmission

        def awaiting(plans_done, submitted):
            run = queued_run(sent_s_ago=5, status="running", planner="gateway", lease_owner="w", lease_token=1,
                             lease_expires_at=timezone.now() - timedelta(seconds=1),
                             state={"planning": {"reason_code": "initial"}, "usage": {"plans": plans_done}})
            for revision in submitted:
                PlanSubmission.objects.create(run=run, revision=revision, plan=[], submitted_by=operator)
            return run

        for _ in range(5):   # idle: their plans so far carried out, the next not submitted yet
            awaiting(2, [1, 2])
        arrived = awaiting(2, [1, 2, 3])
        first = queued_run(sent_s_ago=5, status="running", planner="external", state={})   # never advanced
        PlanSubmission.objects.create(run=first, revision=1, plan=[], submitted_by=operator)
        with django_assert_max_num_queries(3):   # the query, then the one wake-up's send record
            sweeps._wake_runs_with_submitted_plans(timezone.now())
        assert sent == [arrived.pk]
