"""Services: syncing the bundled suites, starting an evaluation."""
import pytest

from core.errors import InvalidInput, NotAllowed
from core.models import AuditEvent
from evaluation import services
from evaluation.models import Evaluation, EvaluationSuite

pytestmark = pytest.mark.django_db


class TestSuiteSync:
    def test_it_creates_the_bundled_suites_once(self):
        first = services.evaluation_suites_sync()
        updated = EvaluationSuite.objects.get(name="standard").updated_at
        second = services.evaluation_suites_sync()
        assert [s.pk for s in first] == [s.pk for s in second]
        assert EvaluationSuite.objects.filter(name="standard", bundled=True).count() == 1
        assert EvaluationSuite.objects.get(name="standard").updated_at == updated

    def test_it_brings_an_edited_bundled_suite_back_to_its_file(self, standard_suite):
        standard_suite.tasks = standard_suite.tasks[:1]
        standard_suite.save()
        services.evaluation_suites_sync()
        assert len(EvaluationSuite.objects.get(name="standard").tasks) >= 20


class TestEvaluationStart:
    def test_it_queues_an_evaluation_on_commit_and_audits_it(self, operator, standard_suite,
                                                             django_capture_on_commit_callbacks):
        with django_capture_on_commit_callbacks() as callbacks:
            evaluation = services.evaluation_start(user=operator, suite_id=standard_suite.pk, label="  before  ")
        assert len(callbacks) == 1
        assert evaluation.status == "queued" and evaluation.label == "before"
        assert evaluation.tasks_total == len(standard_suite.tasks) and evaluation.started_by == operator
        event = AuditEvent.objects.get(target_type="evaluation", target_id=str(evaluation.pk))
        assert event.actor == operator and event.details["suite"] == "standard"

    def test_a_viewer_may_not_start_one(self, viewer, standard_suite):
        with pytest.raises(NotAllowed):
            services.evaluation_start(user=viewer, suite_id=standard_suite.pk)
        assert not Evaluation.objects.exists()

    def test_it_refuses_an_unknown_suite(self, operator):
        with pytest.raises(InvalidInput, match="does not exist"):
            services.evaluation_start(user=operator, suite_id=999)

    def test_it_refuses_an_invalid_suite_listing_its_problems(self, operator):
        suite = EvaluationSuite.objects.create(name="broken", tasks=[{"name": "a"}, {"name": "a"}])
        with pytest.raises(InvalidInput) as caught:
            services.evaluation_start(user=operator, suite_id=suite.pk)
        assert "task 'a' is defined twice" in caught.value.fields["suite"]
        assert not Evaluation.objects.exists()


class TestStaleEvaluations:
    def test_it_fails_an_evaluation_whose_worker_vanished(self, operator, standard_suite):
        from django.utils import timezone

        now = timezone.now()
        stale = services.evaluation_create(user=operator, suite_id=standard_suite.pk)
        fresh = services.evaluation_create(user=operator, suite_id=standard_suite.pk)
        Evaluation.objects.filter(pk=stale.pk).update(status="running", started_at=now - timezone.timedelta(hours=1))
        Evaluation.objects.filter(pk=fresh.pk).update(status="running", started_at=now)
        assert services.evaluation_fail_stale(now=now) == 1
        stale.refresh_from_db()
        fresh.refresh_from_db()
        assert stale.status == "failed" and "Start the evaluation again" in stale.error
        assert fresh.status == "running"
