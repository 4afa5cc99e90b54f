"""The evaluation API: start (202), follow, list suites; one end-to-end run on a real worker."""
import pytest

from evaluation.models import Evaluation

pytestmark = pytest.mark.django_db


class TestEvaluationStartApi:
    url = "/api/evaluations/"

    def test_an_operator_starts_an_evaluation_by_suite_name(self, api_for, operator, standard_suite,
                                                             django_capture_on_commit_callbacks):
        with django_capture_on_commit_callbacks() as callbacks:
            response = api_for(operator).post(self.url, {"suite": "standard", "label": "before"}, format="json")
        assert response.status_code == 202, response.content
        evaluation = Evaluation.objects.get(pk=response.json()["id"])
        assert evaluation.label == "before" and evaluation.status == "queued" and len(callbacks) == 1

    def test_it_accepts_the_suite_id_too(self, api_for, operator, standard_suite, django_capture_on_commit_callbacks):
        with django_capture_on_commit_callbacks():
            response = api_for(operator).post(self.url, {"suite": str(standard_suite.pk)}, format="json")
        assert response.status_code == 202

    def test_a_viewer_cannot_start_one(self, api_for, viewer, standard_suite):
        response = api_for(viewer).post(self.url, {"suite": "standard"}, format="json")
        assert response.status_code == 403
        assert not Evaluation.objects.exists()

    def test_an_unknown_suite_is_a_400(self, api_for, operator):
        response = api_for(operator).post(self.url, {"suite": "nope"}, format="json")
        assert response.status_code == 400 and response.json()["error"]["fields"]["suite"]


class TestEvaluationReadApi:
    def test_it_returns_status_progress_summary_and_results(self, api_for, viewer, operator, small_suite, run_suite):
        evaluation = run_suite(small_suite, operator)
        body = api_for(viewer).get(f"/api/evaluations/{evaluation.pk}/").json()
        assert body["status"] == "completed" and body["progress"] == {"tasks_done": 2, "tasks_total": 2}
        assert body["summary"]["modes"]["planning"]["successes"] == 2
        assert len(body["results"]) == 4
        first = body["results"][0]
        assert first["trace_url"] == f"/runs/{first['run_id']}/" and first["verdict"]["code"]

    def test_it_lists_evaluations_for_viewers(self, api_for, viewer, operator, small_suite, run_suite):
        run_suite(small_suite, operator)
        body = api_for(viewer).get("/api/evaluations/").json()
        assert body["count"] == 1 and body["results"][0]["suite"] == "small"

    def test_a_missing_evaluation_is_a_404(self, api_for, viewer):
        assert api_for(viewer).get("/api/evaluations/999/").status_code == 404

    def test_it_lists_suites_with_their_tasks(self, api_for, viewer, standard_suite):
        suites = api_for(viewer).get("/api/evaluation-suites/").json()
        standard = next(s for s in suites if s["name"] == "standard")
        assert standard["task_count"] >= 20 and "lookup-policy-by-id" in standard["task_names"]

    def test_a_user_without_roles_sees_nothing(self, api_for, nobody, standard_suite):
        assert api_for(nobody).get("/api/evaluation-suites/").status_code == 403
        assert api_for(nobody).get("/api/evaluations/").status_code == 403


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_an_evaluation_started_through_the_api_runs_on_a_real_worker(celery_worker, api_for, operator, wait_until):
    from evaluation.services import evaluation_suites_sync

    evaluation_suites_sync()
    response = api_for(operator).post("/api/evaluations/", {"suite": "standard", "label": "e2e"}, format="json")
    assert response.status_code == 202
    url = f"/api/evaluations/{response.json()['id']}/"
    body = wait_until(lambda: (b := api_for(operator).get(url).json())["status"] in ("completed", "failed") and b,
                      timeout=120, message="the evaluation to finish")
    assert body["status"] == "completed", body["error"]
    assert body["progress"]["tasks_done"] == body["progress"]["tasks_total"] >= 20
    assert body["summary"]["expectations_met"] == body["summary"]["expectations_total"]
