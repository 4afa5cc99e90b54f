"""The runner: both modes through the production controller, persisted as real runs."""
import pytest

from evaluation.models import Evaluation, EvaluationResult
from runs.models import Approval, Attempt, Decision, PlanRevision, Run

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="class")
def standard_evaluation(class_operator):
    """The bundled suite evaluated once per class: its tests only read the results (~0.6 s a run)."""
    from evaluation.services import evaluation_run_now, evaluation_suites_sync

    suite = next(s for s in evaluation_suites_sync() if s.name == "standard")
    return evaluation_run_now(user=class_operator, suite_id=suite.pk, label="baseline")


def result(evaluation, task, mode):
    return EvaluationResult.objects.select_related("run").get(evaluation=evaluation, task=task, mode=mode)


class TestTheBundledSuite:
    def test_it_completes_with_a_result_per_task_and_mode(self, standard_evaluation, standard_suite):
        assert standard_evaluation.status == Evaluation.Status.COMPLETED, standard_evaluation.error
        n = len(standard_suite.tasks)
        assert standard_evaluation.tasks_done == standard_evaluation.tasks_total == n
        assert EvaluationResult.objects.filter(evaluation=standard_evaluation).count() == 2 * n

    def test_a_simple_lookup_is_as_good_and_cheaper_directly(self, standard_evaluation):
        direct = result(standard_evaluation, "lookup-policy-by-id", "direct")
        planning = result(standard_evaluation, "lookup-policy-by-id", "planning")
        assert direct.verified_success and planning.verified_success
        assert direct.tool_calls == planning.tool_calls == 1
        assert direct.tokens == 0 and planning.tokens == 640 and planning.cost > direct.cost == 0
        # The planner call takes (simulated) time too.
        assert planning.simulated_latency_s == pytest.approx(direct.simulated_latency_s + 1.5)
        assert planning.details["verdict"]["code"] == "direct_as_good"

    def test_a_transient_failure_then_an_empty_result_is_where_planning_earns_it(self, standard_evaluation):
        task = "timeout-then-empty-needs-broader-query"
        direct, planning = result(standard_evaluation, task, "direct"), result(standard_evaluation, task, "planning")
        assert not direct.verified_success and direct.stop_reason == "stalled"
        assert direct.retries == 1 and direct.failed_observations == 1
        assert planning.verified_success and planning.recovered and planning.revisions == 2
        assert planning.details["verdict"]["code"] == "planning_earned"
        assert "recovered" in planning.details["verdict"]["reason"]

    def test_clear_cases_get_the_right_verdict(self, standard_evaluation):
        clear = {"empty-result-needs-broader-query": "planning_earned", "orders-of-customer-by-name": "planning_earned",
                 "unauthorized-write-use-change-request": "planning_earned", "poll-job-until-done": "direct_as_good",
                 "permission-denied-by-capability": "both_failed", "reviewer-rejects-the-refund": "both_failed"}
        found = {task: result(standard_evaluation, task, "planning").details["verdict"]["code"] for task in clear}
        assert found == clear

    def test_every_verdict_is_the_one_the_suite_expects(self, standard_evaluation):
        summary = standard_evaluation.summary
        assert summary["expectations_met"] == summary["expectations_total"] == len(summary["tasks"])

    def test_the_summary_aggregates_each_mode(self, standard_evaluation):
        direct, planning = (standard_evaluation.summary["modes"][m] for m in ("direct", "planning"))
        assert direct["total_tokens"] == 0 < planning["total_tokens"]
        assert planning["success_rate"] > direct["success_rate"]
        for measure in ("mean_tool_calls", "repeated_action_rate", "mean_latency_s", "total_cost", "stall_rate",
                        "budget_stop_rate", "recovery_rate"):
            assert measure in direct and measure in planning
        assert sum(standard_evaluation.summary["verdicts"].values()) == len(standard_evaluation.summary["tasks"])

    def test_both_modes_run_under_the_same_budgets_and_deadline(self, standard_evaluation):
        for task in ("slow-service-misses-deadline", "replanning-runs-out-of-tokens"):
            direct, planning = result(standard_evaluation, task, "direct"), result(standard_evaluation, task, "planning")
            assert direct.run.budgets == planning.run.budgets
        deadline = result(standard_evaluation, "slow-service-misses-deadline", "direct")
        assert deadline.run.budgets["deadline_s"] == 20 and deadline.stop_reason == "budget_exhausted:deadline"
        assert deadline.details["budget_stop"] is True


class TestPersistedTraces:
    def test_each_result_is_a_real_run_with_its_trace(self, standard_evaluation, class_operator):
        planning = result(standard_evaluation, "timeout-then-empty-needs-broader-query", "planning")
        run = planning.run
        assert run.evaluation_id == standard_evaluation.pk and run.owner == class_operator
        assert run.planner == "scripted" and run.status == "completed" and run.stop_reason == "completed"
        assert run.lease_owner == "" and run.finished_at >= run.started_at
        attempts = Attempt.objects.filter(run=run).order_by("started_at", "id")
        assert [a.status for a in attempts] == ["retryable", "ok", "ok"]
        assert all(a.capability_version_id is None for a in attempts)
        assert PlanRevision.objects.filter(run=run).count() == 2
        assert Decision.objects.filter(run=run).count() == 3
        assert run.tool_calls == planning.tool_calls == 3

    def test_the_direct_run_uses_the_direct_planner_and_never_replans(self, standard_evaluation):
        direct = result(standard_evaluation, "empty-result-needs-broader-query", "direct")
        assert direct.run.planner == "direct" and direct.run.revisions == 1
        assert Attempt.objects.filter(run=direct.run).count() == 1
        assert "direct mode does not replan" in direct.run.stop_detail

    def test_simulated_time_is_recorded_from_the_wall_clock_start(self, standard_evaluation):
        poll = result(standard_evaluation, "poll-job-until-done", "direct")
        assert (poll.run.finished_at - poll.run.started_at).total_seconds() == pytest.approx(10, abs=0.01)
        attempts = list(Attempt.objects.filter(run=poll.run).order_by("started_at"))
        assert (attempts[-1].started_at - attempts[0].started_at).total_seconds() == pytest.approx(10, abs=0.01)
        assert abs((poll.run.started_at - poll.run.created_at).total_seconds()) < 60

    def test_scripted_approvals_are_recorded_as_decided(self, standard_evaluation, class_operator):
        granted = result(standard_evaluation, "open-ticket-with-approval", "planning").run
        approval = Approval.objects.get(run=granted)
        assert approval.state == "approved" and approval.decided_by == class_operator
        assert "Scripted by the evaluation suite" in approval.comment
        rejected = Approval.objects.get(run=result(standard_evaluation, "reviewer-rejects-the-refund", "direct").run)
        assert rejected.state == "rejected"

    def test_evaluation_runs_leave_nothing_live(self, standard_evaluation):
        runs = Run.objects.filter(evaluation=standard_evaluation)
        assert runs.count() == 2 * standard_evaluation.tasks_total
        assert not runs.exclude(status__in=["completed", "stopped"]).exists()
        assert not Approval.objects.filter(run__evaluation=standard_evaluation, state="pending").exists()


class TestRunning:
    def test_an_approval_the_script_never_gives_stops_the_run_at_its_deadline(self, operator, run_suite):
        import copy
        import json

        from evaluation.models import EvaluationSuite
        from evaluation.suites import SUITES_DIR

        tasks = json.loads((SUITES_DIR / "standard.json").read_text())["tasks"]
        task = copy.deepcopy(next(t for t in tasks if t["name"] == "open-ticket-with-approval"))
        task["approvals"] = []
        suite = EvaluationSuite.objects.create(name="no approvals", tasks=[task])
        evaluation = run_suite(suite, operator)
        row = EvaluationResult.objects.get(evaluation=evaluation, mode="direct")
        assert row.stop_reason == "budget_exhausted:deadline" and not row.verified_success
        assert Approval.objects.get(run=row.run).state == "expired"

    def test_a_second_delivery_of_the_same_evaluation_does_nothing(self, small_suite, operator):
        from evaluation.runner import evaluation_run
        from evaluation.services import evaluation_create

        evaluation = evaluation_create(user=operator, suite_id=small_suite.pk)
        assert evaluation_run(evaluation_id=evaluation.pk).status == "completed"
        assert evaluation_run(evaluation_id=evaluation.pk) is None
        assert EvaluationResult.objects.filter(evaluation=evaluation).count() == 4

    def test_an_invalid_suite_fails_the_evaluation_with_its_problems(self, operator, small_suite):
        from evaluation.models import SuiteVersion
        from evaluation.runner import evaluation_run
        from evaluation.services import evaluation_create

        evaluation = evaluation_create(user=operator, suite_id=small_suite.pk)
        # The evaluation runs the version it recorded: that row damaged after the start (versions are
        # never edited by the product; a hand edit of the database could).
        SuiteVersion.objects.filter(pk=evaluation.suite_version_id).update(tasks=[{"name": "x"}])
        evaluation = evaluation_run(evaluation_id=evaluation.pk)
        assert evaluation.status == "failed" and "the suite is invalid" in evaluation.error
        assert evaluation.finished_at is not None
