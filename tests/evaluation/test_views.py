"""Evaluation pages: index and start form, the side-by-side page, htmx polling, baseline, export."""
import csv
import io
import json

import pytest

from evaluation.models import Evaluation, EvaluationResult, EvaluationSuite

pytestmark = pytest.mark.django_db


@pytest.fixture
def finished(small_suite, run_suite, operator):
    return run_suite(small_suite, operator, label="after")


class TestIndex:
    url = "/evaluations/"

    def test_a_viewer_sees_suites_and_evaluations_but_no_start_form(self, client_for, viewer, finished):
        body = client_for(viewer).get(self.url).content.decode()
        assert "standard" in body and "small" in body and f'href="/evaluations/{finished.pk}/"' in body
        assert 'id="start-evaluation-form"' not in body

    def test_an_operator_sees_the_start_form(self, client_for, operator, standard_suite):
        body = client_for(operator).get(self.url).content.decode()
        assert 'id="start-evaluation-form"' in body

    def test_the_first_visit_loads_the_bundled_suites(self, client_for, viewer):
        client_for(viewer).get(self.url)
        assert EvaluationSuite.objects.filter(name="standard", bundled=True).exists()

    def test_it_needs_a_login_and_the_view_permission(self, client, client_for, nobody):
        assert client.get(self.url).status_code == 302
        assert client_for(nobody).get(self.url).status_code == 403

    def test_the_nav_links_to_it(self, client_for, viewer):
        body = client_for(viewer).get("/runs/").content.decode()
        assert 'href="/evaluations/"' in body


class TestStart:
    url = "/evaluations/start/"

    def test_an_operator_starts_one_and_lands_on_its_page(self, client_for, operator, standard_suite,
                                                         django_capture_on_commit_callbacks):
        with django_capture_on_commit_callbacks() as callbacks:
            response = client_for(operator).post(self.url, {"suite": standard_suite.pk, "label": "before"})
        evaluation = Evaluation.objects.get()
        assert response.status_code == 302 and response["Location"] == f"/evaluations/{evaluation.pk}/"
        assert len(callbacks) == 1

    def test_a_viewer_cannot_start_one(self, client_for, viewer, standard_suite):
        response = client_for(viewer).post(self.url, {"suite": standard_suite.pk})
        assert response.status_code == 403 and not Evaluation.objects.exists()


class TestDetail:
    def url(self, evaluation, **params):
        from urllib.parse import urlencode

        return f"/evaluations/{evaluation.pk}/" + (f"?{urlencode(params)}" if params else "")

    def test_it_shows_tasks_side_by_side_with_trace_links_and_verdicts(self, client_for, viewer, finished):
        body = client_for(viewer).get(self.url(finished)).content.decode()
        assert 'id="evaluation-table"' in body and 'id="aggregate-row"' in body
        for result in EvaluationResult.objects.filter(evaluation=finished):
            assert f'class="trace-link" href="/runs/{result.run_id}/"' in body
        assert "planning earned its overhead" in body and "direct was as good and cheaper" in body
        assert 'id="chart-cost"' in body and "<svg" in body and 'id="chart-latency"' in body

    def test_the_trace_link_opens_the_run(self, client_for, viewer, finished):
        result = EvaluationResult.objects.filter(evaluation=finished, mode="planning").first()
        assert client_for(viewer).get(f"/runs/{result.run_id}/").status_code == 200

    def test_a_running_evaluation_polls_its_partial(self, client_for, viewer, operator, small_suite):
        evaluation = Evaluation.objects.create(suite=small_suite, started_by=operator, status="running",
                                               tasks_total=2)
        client = client_for(viewer)
        assert 'hx-trigger="every 2s"' in client.get(self.url(evaluation)).content.decode()
        response = client.get(self.url(evaluation), headers={"HX-Request": "true"})
        body = response.content.decode()
        assert response.status_code == 200 and body.lstrip().startswith('<div id="evaluation-body"')
        assert "<html" not in body and "0 of 2 tasks" in body

    def test_the_poll_that_sees_it_finished_stops_polling(self, client_for, viewer, finished):
        response = client_for(viewer).get(self.url(finished), headers={"HX-Request": "true"})
        assert response.status_code == 286
        body = response.content.decode()
        assert 'hx-trigger' not in body and 'id="evaluation-table"' in body

    def test_it_compares_with_a_baseline(self, client_for, viewer, operator, small_suite, run_suite, finished):
        later = run_suite(small_suite, operator, label="later")
        body = client_for(viewer).get(self.url(later, baseline=finished.pk)).content.decode()
        assert 'id="baseline-comparison"' in body and f"#{finished.pk}" in body
        assert "No task changed its verdict or success." in body
        assert "Hollow points: the baseline evaluation." in body

    def test_a_baseline_of_another_suite_is_ignored(self, client_for, viewer, operator, finished, standard_suite,
                                                    run_suite):
        other = run_suite(standard_suite, operator)
        body = client_for(viewer).get(self.url(finished, baseline=other.pk)).content.decode()
        assert 'id="baseline-comparison"' not in body

    def test_it_escapes_labels_and_task_names(self, client_for, viewer, operator, run_suite):
        import copy

        from evaluation.suites import SUITES_DIR

        tasks = json.loads((SUITES_DIR / "standard.json").read_text())["tasks"]
        task = copy.deepcopy(tasks[0])
        task["name"] = "<script>alert(1)</script>"
        suite = EvaluationSuite.objects.create(name="<b>xss</b>", tasks=[task])
        evaluation = run_suite(suite, operator, label="<img src=x onerror=alert(2)>")
        body = client_for(viewer).get(self.url(evaluation)).content.decode()
        assert "<script>alert(1)</script>" not in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body
        assert "<img src=x" not in body and "<b>xss</b>" not in body

    def test_a_missing_evaluation_is_a_404(self, client_for, viewer):
        assert client_for(viewer).get("/evaluations/999/").status_code == 404


class TestExport:
    def test_it_exports_everything_as_json(self, client_for, viewer, finished):
        response = client_for(viewer).get(f"/evaluations/{finished.pk}/export.json")
        assert response.status_code == 200 and "attachment" in response["Content-Disposition"]
        data = json.loads(response.content)
        assert data["id"] == finished.pk and data["summary"]["modes"]["direct"]["tasks"] == 2
        assert len(data["results"]) == 4 and data["results"][0]["trace_url"].startswith("/runs/")

    def test_it_exports_a_row_per_task_and_mode_as_csv(self, client_for, viewer, finished):
        response = client_for(viewer).get(f"/evaluations/{finished.pk}/export.csv")
        assert response["Content-Type"].startswith("text/csv")
        rows = list(csv.DictReader(io.StringIO(response.content.decode())))
        assert len(rows) == 4
        lookup = next(r for r in rows if r["task"] == "lookup-policy-by-id" and r["mode"] == "direct")
        assert lookup["verdict"] == "direct_as_good" and lookup["verified_success"] == "True"
        assert lookup["trace_url"] == f"/runs/{lookup['run_id']}/"

    def test_csv_cells_cannot_become_spreadsheet_formulas(self, operator, run_suite):
        import copy

        from evaluation.export import evaluation_csv
        from evaluation.suites import SUITES_DIR

        task = copy.deepcopy(json.loads((SUITES_DIR / "standard.json").read_text())["tasks"][0])
        task["name"] = "=HYPERLINK(\"http://x\")"
        evaluation = run_suite(EvaluationSuite.objects.create(name="f", tasks=[task]), operator)
        rows = list(csv.DictReader(io.StringIO(evaluation_csv(evaluation))))
        assert all(r["task"].startswith("'=") for r in rows)
