"""The start-a-run page calls run_start and shows its errors beside the fields."""
import pytest

from runs.models import Run


@pytest.fixture
def registry(db):
    from capabilities.kinds.python.sync import python_capabilities_sync

    python_capabilities_sync()


def form_data(**overrides):
    data = {"goal": "Find the travel policy", "planner": "rules", "planner_config": "",
            "completion_capability": "get_document", "completion_path": "id", "completion_check": "exists",
            "completion_equals": "", "budget_max_iterations": 20, "budget_max_revisions": 5,
            "budget_max_plan_steps": 20, "budget_max_plan_depth": 5, "budget_max_tool_calls": 50,
            "budget_deadline_s": 300, "budget_per_call_timeout_s": 30, "budget_max_tokens": 1000,
            "budget_max_cost": 1.0, "budget_max_retries": 5, "budget_max_side_effects_per_minute": 10}
    data.update(overrides)
    return data


@pytest.mark.django_db
class TestRunStartPage:
    def test_it_shows_the_form_with_default_budgets(self, operator, client_for, registry):
        response = client_for(operator).get("/runs/start/")
        assert response.status_code == 200
        body = response.content.decode()
        assert 'name="budget_deadline_s"' in body and 'value="600.0"' in body
        assert '<option value="search_documents">' in body

    def test_it_starts_a_run_and_opens_its_trace(self, operator, client_for, registry, django_capture_on_commit_callbacks):
        with django_capture_on_commit_callbacks() as callbacks:
            response = client_for(operator).post("/runs/start/", form_data(
                completion_check="equals", completion_equals='"POL-7"'))
        run = Run.objects.get()
        assert response.status_code == 302 and response["Location"] == f"/runs/{run.pk}/"
        assert run.completion == {"capability": "get_document", "path": "id", "equals": "POL-7"}
        assert run.budgets["deadline_s"] == 300 and run.owner == operator
        assert len(callbacks) == 1  # the advance task is queued once the run is committed

    def test_it_shows_errors_and_starts_nothing(self, operator, client_for, registry):
        response = client_for(operator).post("/runs/start/", form_data(
            goal="", planner="scripted", planner_config="{broken", budget_deadline_s=0))
        assert response.status_code == 400
        body = response.content.decode()
        assert "This field is required" in body and "Not valid JSON" in body
        assert not Run.objects.exists()

    def test_it_shows_service_errors_beside_the_field(self, operator, client_for, registry):
        response = client_for(operator).post("/runs/start/", form_data(budget_deadline_s=0))
        assert response.status_code == 400
        assert "the deadline must be more than 0 seconds" in response.content.decode()

    def test_a_viewer_may_not_start_runs(self, viewer, client_for, registry):
        assert client_for(viewer).get("/runs/start/").status_code == 403
        assert client_for(viewer).post("/runs/start/", form_data()).status_code == 403
        assert not Run.objects.exists()


@pytest.mark.django_db
class TestStartWithTheSameSettings:
    def test_it_fills_the_form_with_an_earlier_runs_settings(self, operator, client_for, registry, make_run):
        run = make_run(goal="Find the VPN policy", planner="scripted", planner_config={"plans": [[]]},
                       budgets={"max_tool_calls": 7, "deadline_s": 120}, status="stopped")
        body = client_for(operator).get("/runs/start/", {"from_run": run.pk}).content.decode()
        assert "Find the VPN policy</textarea>" in body and f'href="/runs/{run.pk}/">run #{run.pk}</a>' in body
        assert 'name="budget_max_tool_calls" value="7"' in body and 'name="budget_deadline_s" value="120"' in body
        assert '<option value="scripted" selected>' in body and "&quot;plans&quot;" in body
        assert 'name="completion_equals" value="&quot;POL-7&quot;"' in body

    def test_an_unknown_run_to_copy_is_a_404(self, operator, client_for, registry):
        assert client_for(operator).get("/runs/start/", {"from_run": "999"}).status_code == 404
        assert client_for(operator).get("/runs/start/", {"from_run": "x"}).status_code == 404

    def test_it_reports_every_error_in_one_round_with_a_summary(self, operator, client_for, registry):
        response = client_for(operator).post("/runs/start/", form_data(goal="", budget_deadline_s=0))
        body = response.content.decode()
        assert response.status_code == 400 and "data-error-summary" in body
        assert "This field is required" in body and "the deadline must be more than 0 seconds" in body
        assert '<a href="#id_goal">Goal</a>' in body

    def test_budget_labels_read_as_words(self, operator, client_for, registry):
        body = client_for(operator).get("/runs/start/").content.decode()
        assert ">Max. plan steps<" in body and ">Deadline (s)<" in body and "(s)teps" not in body


@pytest.mark.django_db
class TestTheFormStartsOnce:
    def test_the_same_form_sent_twice_opens_the_run_the_first_started(self, operator, client_for, registry):
        client = client_for(operator)
        page = client.get("/runs/start/").content.decode()
        key = page.split('name="request_key" value="', 1)[1].split('"', 1)[0]
        assert len(key) == 32 and key not in client.get("/runs/start/").content.decode()   # one per form shown
        first = client.post("/runs/start/", form_data(request_key=key))
        again = client.post("/runs/start/", form_data(request_key=key))   # a double click, a resend
        run = Run.objects.get()
        assert first["Location"] == again["Location"] == f"/runs/{run.pk}/"

    def test_the_form_sent_again_with_other_settings_starts_another_run(self, operator, client_for, registry):
        client = client_for(operator)
        client.post("/runs/start/", form_data(request_key="k" * 32))
        client.post("/runs/start/", form_data(request_key="k" * 32, goal="Find the refund policy"))   # back, edit
        assert sorted(Run.objects.values_list("goal", flat=True)) == ["Find the refund policy", "Find the travel policy"]

    def test_a_key_the_form_did_not_draw_starts_the_run_without_one(self, operator, client_for, registry):
        response = client_for(operator).post("/runs/start/", form_data(request_key="naïve\n"))
        assert response.status_code == 302 and Run.objects.count() == 1
