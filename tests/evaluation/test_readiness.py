"""The readiness review on crafted capabilities and runs."""
from datetime import timedelta

import pytest

from evaluation.readiness import readiness_review

pytestmark = pytest.mark.django_db


@pytest.fixture
def capability(db):
    from capabilities.models import Capability, CapabilityVersion

    def make(name, **policy):
        cap = Capability.objects.create(name=name, kind="python")
        version = CapabilityVersion.objects.create(capability=cap, number=1, **policy)
        cap.current_version = version
        cap.save(update_fields=["current_version", "updated_at"])
        return cap

    return make


@pytest.fixture
def run(db, operator):
    import itertools

    from runs.models import Run

    seq = itertools.count(1)

    def make(*, completion=None, budgets=None, **fields):
        return Run.objects.create(goal="g", completion={"capability": "x", "path": "a", "exists": True}
                                  if completion is None else completion,
                                  budgets=budgets or {"deadline_s": 60, "max_tool_calls": 20, "max_iterations": 10},
                                  planner="scripted", owner=operator, trace_id=f"t{next(seq):031d}", **fields)

    return make


def item(key):
    return next(i for i in readiness_review() if i.key == key)


class TestCapabilityChecks:
    def test_side_effects_without_permission_and_approval_fail(self, capability):
        capability("wire_money", side_effect="external", retry_max_attempts=1)
        capability("open_ticket", side_effect="write", permission="t.create", retry_max_attempts=1)
        capability("search", side_effect="none")
        found = item("authorization")
        assert found.status == "fail"
        texts = [e.text for e in found.evidence]
        assert any("wire_money" in t and "needs neither a permission nor an approval" in t for t in texts)
        assert any("open_ticket" in t and "requires no approval" in t for t in texts)
        assert not any("search" in t for t in texts)
        assert {e.url for e in found.evidence} == {"/capabilities/wire_money/", "/capabilities/open_ticket/"}

    def test_guarded_side_effects_pass(self, capability):
        capability("open_ticket", side_effect="write", permission="t.create", requires_approval=True, idempotent=True)
        assert item("authorization").status == "pass"

    def test_blind_retries_of_a_side_effect_fail_and_long_timeouts_warn(self, capability):
        capability("charge", side_effect="write", permission="p", requires_approval=True, retry_max_attempts=3)
        capability("slow_report", timeout_s=600)
        capability("weird", retry_on=["permission_denied", "timeout"])
        found = item("failure_classes")
        assert found.status == "fail"
        texts = " | ".join(e.text for e in found.evidence)
        assert "charge v1 retries a side effect up to 3 times" in texts
        assert "slow_report v1 has a timeout of 600 s" in texts
        assert "weird v1 lists terminal failures as retryable: permission_denied" in texts

    def test_an_empty_retry_on_is_the_default_classification(self, capability):
        capability("search", retry_max_attempts=3, retry_on=[])
        assert item("failure_classes").status == "pass"

    def test_very_long_polling_warns_and_bounded_polling_passes(self, capability):
        capability("job_status", polling_max_attempts=10, polling_interval_s=5)
        assert item("polling").status == "pass"
        capability("forever", polling_max_attempts=5000, polling_interval_s=60)
        found = item("polling")
        assert found.status == "warn"
        assert any("forever" in e.text and e.url == "/capabilities/forever/" for e in found.evidence)

    def test_schemas_accepting_anything_warn(self, capability):
        capability("loose", schema={})
        capability("strict", schema={"type": "object", "properties": {"q": {"type": "string"}}})
        found = item("validation")
        assert found.status == "warn"
        assert [e.url for e in found.evidence if e.url] == ["/capabilities/loose/"]


class TestRunChecks:
    def test_recent_runs_without_completion_criteria_fail(self, run):
        bare = run(completion={})
        run()
        found = item("completion")
        assert found.status == "fail" and [e.url for e in found.evidence] == [f"/runs/{bare.pk}/"]

    def test_old_runs_are_not_reviewed(self, run):
        from django.utils import timezone

        from runs.models import Run

        bare = run(completion={})
        Run.objects.filter(pk=bare.pk).update(created_at=timezone.now() - timedelta(days=8))
        assert item("completion").status == "pass"

    def test_unbounded_budgets_warn(self, run):
        long = run(budgets={"deadline_s": 3 * 86_400, "max_tool_calls": 20, "max_iterations": 10})
        many = run(budgets={"deadline_s": 60, "max_tool_calls": 50_000, "max_iterations": 10})
        run()
        found = item("budgets")
        assert found.status == "warn"
        assert {e.url for e in found.evidence} == {f"/runs/{long.pk}/", f"/runs/{many.pk}/"}

    def test_finished_runs_always_have_a_stop_reason(self, run):
        from django.utils import timezone

        run(status="completed", stop_reason="completed", finished_at=timezone.now())
        found = item("stop_reasons")
        assert found.status == "pass" and found.evidence == []

    def test_evidence_lists_are_bounded(self, run):
        for _ in range(25):
            run(completion={})
        found = item("completion")
        assert len(found.evidence) == 20 and found.more == 5


class TestEvaluationCheck:
    def test_it_warns_when_planning_was_never_measured(self, db):
        found = item("evaluation")
        assert found.status == "warn" and found.evidence[0].url == "/evaluations/"

    def test_it_reports_the_latest_evaluation(self, operator, small_suite, run_suite):
        evaluation = run_suite(small_suite, operator)
        found = item("evaluation")
        assert found.status == "pass"
        assert found.evidence[0].url == f"/evaluations/{evaluation.pk}/"
        assert any("Planning earned its overhead on 1 of 2 tasks" in e.text for e in found.evidence)


class TestReadinessPage:
    def test_viewers_see_every_item_with_links(self, client_for, viewer, capability, run):
        capability("wire_money", side_effect="external")
        bare = run(completion={})
        response = client_for(viewer).get("/evaluations/readiness/")
        body = response.content.decode()
        assert response.status_code == 200
        for key in ("validation", "authorization", "failure_classes", "polling", "completion", "budgets",
                    "stop_reasons", "evaluation"):
            assert f'id="readiness-{key}"' in body
        assert 'href="/capabilities/wire_money/"' in body and f'href="/runs/{bare.pk}/"' in body

    def test_it_needs_the_view_permission(self, client_for, nobody):
        assert client_for(nobody).get("/evaluations/readiness/").status_code == 403

    def test_it_issues_a_bounded_number_of_queries(self, client_for, viewer, capability, run,
                                                   django_assert_max_num_queries):
        for i in range(30):
            capability(f"cap_{i}", side_effect="write")
            run(completion={})
        client = client_for(viewer)
        with django_assert_max_num_queries(25):
            client.get("/evaluations/readiness/")
