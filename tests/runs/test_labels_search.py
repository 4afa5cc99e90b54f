"""Run labels and search: from the start form and the API, filters on the list, API and dashboard, saved views."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from core.errors import InvalidInput
from runs import services
from runs.models import Run, RunLabel, SavedView

COMPLETION = {"capability": "search_documents", "path": "documents.0.id", "exists": True}


@pytest.fixture
def labelled(make_run):
    """Three runs: payments/triage, payments/billing, search/triage."""
    from runs.models import RunLabel

    def make(goal, **labels):
        run = make_run(goal=goal, labels=labels)
        RunLabel.objects.bulk_create([RunLabel(run=run, key=k, value=v) for k, v in labels.items()])
        return run

    return {"a": make("alpha-pay-triage", team="payments", agent="triage"),
            "b": make("beta-pay-billing", team="payments", agent="billing"),
            "c": make("gamma-search-triage", team="search", agent="triage")}


def _goals(body: str) -> set[str]:
    return {g for g in ("alpha-pay-triage", "beta-pay-billing", "gamma-search-triage") if g in body}


class TestStartingWithLabels:
    def test_run_start_stores_the_labels_on_the_run_and_as_indexed_rows(self, operator, manual_advance):
        run = services.run_start(owner=operator, goal="g", completion=COMPLETION,
                                 labels={"team": "payments", "agent": "triage"})
        assert Run.objects.get(pk=run.pk).labels == {"team": "payments", "agent": "triage"}
        assert set(RunLabel.objects.filter(run=run).values_list("key", "value")) == {("team", "payments"),
                                                                                    ("agent", "triage")}

    @pytest.mark.parametrize("labels", [{"Team": "x"}, {"team": ""}, {"team": 3}, ["team=x"],
                                        {f"k{i}": "v" for i in range(21)}, {"team": "x" * 201}])
    def test_run_start_refuses_bad_labels_with_a_field_error(self, operator, manual_advance, labels):
        with pytest.raises(InvalidInput) as caught:
            services.run_start(owner=operator, goal="g", completion=COMPLETION, labels=labels)
        assert "labels" in caught.value.fields
        assert not Run.objects.exists()

    def test_the_start_form_takes_key_value_pairs(self, client_for, operator, manual_advance, db):
        from capabilities.kinds.python.sync import python_capabilities_sync

        python_capabilities_sync()
        response = client_for(operator).post("/runs/start/", {
            "goal": "Labelled from the form", "planner": "rules", "completion_capability": "search_documents",
            "completion_path": "documents.0.id", "completion_check": "exists", "labels": "team=payments, agent=triage",
            **{f"budget_{k}": v for k, v in {"max_iterations": 10, "max_revisions": 3, "max_plan_steps": 10,
                                              "max_plan_depth": 5, "max_tool_calls": 20, "deadline_s": 60,
                                              "per_call_timeout_s": 30, "max_tokens": 1000, "max_cost": 1,
                                              "max_retries": 3, "max_side_effects_per_minute": 10}.items()}})
        assert response.status_code == 302, response.content.decode()[:2000]
        assert Run.objects.get(goal="Labelled from the form").labels == {"team": "payments", "agent": "triage"}

    def test_the_start_form_shows_a_malformed_label(self, client_for, operator, db):
        response = client_for(operator).post("/runs/start/", {"goal": "x", "labels": "team payments"})
        assert response.status_code == 400
        assert "write labels as key=value" in response.content.decode()

    def test_the_api_and_so_the_external_agent_api_start_runs_with_labels(self, api_for, operator, manual_advance):
        response = api_for(operator).post("/api/runs/start/", {
            "goal": "From an agent", "planner": "external", "completion": COMPLETION,
            "labels": {"team": "payments", "agent": "langgraph"}}, format="json")
        assert response.status_code == 201, response.json()
        assert response.json()["labels"] == {"team": "payments", "agent": "langgraph"}
        bad = api_for(operator).post("/api/runs/start/", {"goal": "x", "completion": COMPLETION,
                                                          "labels": {"BAD KEY": "v"}}, format="json")
        assert bad.status_code == 400 and "labels" in str(bad.json())


class TestSearchingTheList:
    url = "/runs/"

    def test_it_filters_by_one_or_more_labels_and_by_key_alone(self, client_for, viewer, labelled):
        client = client_for(viewer)
        assert _goals(client.get(self.url, {"label": "team=payments"}).content.decode()) == {
            "alpha-pay-triage", "beta-pay-billing"}
        assert _goals(client.get(self.url, {"label": "team=payments, agent=triage"}).content.decode()) == {
            "alpha-pay-triage"}
        assert _goals(client.get(self.url, {"label": "agent"}).content.decode()) == {
            "alpha-pay-triage", "beta-pay-billing", "gamma-search-triage"}
        assert _goals(client.get(self.url, {"label": "team=nobody"}).content.decode()) == set()

    def test_label_is_the_parameter_the_api_and_dashboard_use_and_the_old_name_still_works(
            self, client_for, viewer, labelled):
        client = client_for(viewer)
        both = {"alpha-pay-triage", "beta-pay-billing"}
        assert _goals(client.get("/runs/?label=team%3Dpayments").content.decode()) == both
        assert _goals(client.get("/runs/?label=team%3Dpayments&label=agent%3Dtriage").content.decode()) == {
            "alpha-pay-triage"}
        assert _goals(client.get("/runs/?labels=team%3Dpayments").content.decode()) == both

    def test_an_applied_filter_reaches_the_save_form(self, client_for, viewer, labelled):
        # The filters apply by an htmx swap of the table: the save form outside it gets the query too.
        response = client_for(viewer).get(self.url, {"label": "team=payments", "stop_reason": "stalled"},
                                          HTTP_HX_REQUEST="true")
        body = response.content.decode()
        assert ('<input type="hidden" name="query" id="saved-view-query" '
                'value="label=team%3Dpayments&amp;stop_reason=stalled" hx-swap-oob="true">') in body

    def test_it_shows_labels_as_links_to_their_filter(self, client_for, viewer, labelled):
        body = client_for(viewer).get(self.url).content.decode()
        assert 'href="/runs/?label=team%3Dpayments"' in body

    def test_it_filters_by_goal_text(self, client_for, viewer, labelled):
        body = client_for(viewer).get(self.url, {"goal": "BILLING"}).content.decode()
        assert _goals(body) == {"beta-pay-billing"}

    def test_a_malformed_label_filter_is_shown_and_the_other_filters_apply(self, client_for, viewer, labelled):
        response = client_for(viewer).get(self.url, {"label": "Bad Key=1", "goal": "alpha"})
        assert response.status_code == 200
        body = response.content.decode()
        assert "a key is 1-63" in body and _goals(body) == {"alpha-pay-triage"}

    def test_label_and_text_search_stays_within_the_query_budget(self, client_for, viewer, labelled, make_run,
                                                                  django_assert_max_num_queries):
        for i in range(60):
            make_run(goal=f"extra-{i}")
        client = client_for(viewer)
        with django_assert_max_num_queries(13):   # +1: the projects the user holds
            client.get(self.url, {"label": "team=payments, agent", "goal": "a",
                                              "capability": "search_documents", "sort": "-cost"})


class TestApiSearch:
    url = "/api/runs/"

    def _goals(self, response):
        assert response.status_code == 200, response.json()
        return {r["goal"] for r in response.json()["results"]}

    def test_it_filters_by_labels_goal_and_time(self, api_for, viewer, labelled):
        api = api_for(viewer)
        assert self._goals(api.get(self.url, {"label": ["team=payments", "agent=triage"]})) == {"alpha-pay-triage"}
        assert self._goals(api.get(self.url, {"label": "team=payments"})) == {"alpha-pay-triage", "beta-pay-billing"}
        assert self._goals(api.get(self.url, {"goal": "gamma"})) == {"gamma-search-triage"}
        future = (timezone.now() + timedelta(hours=1)).isoformat()
        assert self._goals(api.get(self.url, {"created_from": future})) == set()
        results = api.get(self.url, {"label": "team=search"}).json()["results"]
        assert results[0]["labels"] == {"team": "search", "agent": "triage"}

    def test_it_filters_by_capability_used(self, api_for, viewer, labelled, make_revision, make_step, make_attempt):
        make_attempt(make_step(make_revision(labelled["b"]), capability="get_document"))
        assert self._goals(api_for(viewer).get(self.url, {"capability": "get_document"})) == {"beta-pay-billing"}

    def test_an_unknown_parameter_is_a_400_naming_it(self, api_for, viewer, labelled):
        response = api_for(viewer).get(self.url, {"labels": "team=payments", "stauts": "stopped", "page": 1})
        assert response.status_code == 400
        error = response.json()["error"]
        assert set(error["fields"]) == {"labels", "stauts"}
        assert "Unknown fields: labels, stauts" in error["message"]

    def test_a_malformed_filter_is_a_400(self, api_for, viewer, labelled):
        response = api_for(viewer).get(self.url, {"label": "NOT A KEY"})
        assert response.status_code == 400
        assert "label" in response.json()["error"]["fields"]


class TestSavedViews:
    def test_a_user_saves_a_view_sees_it_and_deletes_it(self, client_for, viewer, labelled):
        client = client_for(viewer)
        response = client.post("/runs/views/save/", {"name": "payments", "query": "label=team%3Dpayments&page=3"})
        assert response.status_code == 302 and response["Location"] == "/runs/?label=team%3Dpayments"
        view = SavedView.objects.get(user=viewer)
        assert view.query == "label=team%3Dpayments"  # paging is not part of a view
        body = client.get("/runs/").content.decode()
        assert ">payments</a>" in body and 'href="/runs/?label=team%3Dpayments"' in body
        client.post("/runs/views/save/", {"name": "payments", "query": "label=team%3Dsearch"})
        assert SavedView.objects.get(user=viewer).query == "label=team%3Dsearch"
        client.post(f"/runs/views/{view.pk}/delete/")
        assert not SavedView.objects.exists()

    def test_the_api_refuses_an_unknown_field_and_saves_nothing(self, api_for, viewer):
        response = api_for(viewer).post("/api/saved-views/", {"name": "stalls", "filters": "stop_reason=stalled"},
                                        format="json")
        assert response.status_code == 400
        assert response.json()["error"]["fields"] == {"filters": "unknown field"}
        assert not SavedView.objects.exists()

    def test_views_are_per_user(self, client_for, api_for, viewer, operator, labelled):
        SavedView.objects.create(user=operator, name="otto's", query="status=stopped")
        body = client_for(viewer).get("/runs/").content.decode()
        assert "otto&#x27;s" not in body and "otto's" not in body
        assert api_for(viewer).get("/api/saved-views/").json() == []
        view = SavedView.objects.get()
        assert api_for(viewer).delete(f"/api/saved-views/{view.pk}/").status_code == 404
        assert SavedView.objects.exists()

    def test_the_api_saves_lists_and_deletes(self, api_for, viewer):
        api = api_for(viewer)
        created = api.post("/api/saved-views/", {"name": "stalls", "query": "stop_reason=stalled"}, format="json")
        assert created.status_code == 201
        assert [v["name"] for v in api.get("/api/saved-views/").json()] == ["stalls"]
        assert api.post("/api/saved-views/", {"name": "", "query": ""}, format="json").status_code == 400
        assert api.delete(f"/api/saved-views/{created.json()['id']}/").status_code == 204
        assert api.get("/api/saved-views/").json() == []


class TestDashboardByLabel:
    def test_it_counts_only_the_runs_with_the_label(self, client_for, viewer, labelled):
        client = client_for(viewer)
        all_runs = client.get("/runs/dashboard/").context["runs_created"]
        payments = client.get("/runs/dashboard/", {"label": "team=payments"}).context
        assert all_runs == 3 and payments["runs_created"] == 2
        assert client.get("/runs/dashboard/", {"label": "agent=triage,team=search"}).context["runs_created"] == 1

    def test_window_links_keep_the_label(self, client_for, viewer, labelled):
        body = client_for(viewer).get("/runs/dashboard/", {"label": "team=payments"}).content.decode()
        assert "?window=7d&amp;label=team%3Dpayments" in body


class TestStallKind:
    def test_the_list_and_the_api_filter_by_stall_kind(self, client_for, api_for, viewer, make_run):
        make_run(goal="looping-run", status="stopped", stop_reason="stalled", stall_kind="repeated_without_progress")
        make_run(goal="no-more-plans", status="stopped", stop_reason="stalled", stall_kind="planner_exhausted")
        body = client_for(viewer).get("/runs/", {"stall_kind": "planner_exhausted"}).content.decode()
        assert "no-more-plans" in body and "looping-run" not in body
        results = api_for(viewer).get("/api/runs/", {"stall_kind": "repeated_without_progress"}).json()["results"]
        assert [r["goal"] for r in results] == ["looping-run"]

    def test_an_unknown_stall_kind_is_a_400(self, api_for, viewer):
        response = api_for(viewer).get("/api/runs/", {"stall_kind": "bored"})
        assert response.status_code == 400 and "stall_kind" in response.json()["error"]["fields"]


@pytest.mark.services
@pytest.mark.parametrize("index", ["run_goal_upper_trgm_idx", "run_stop_detail_upper_trgm_idx"])
def test_goal_and_stop_detail_search_have_a_trigram_index_on_postgresql(db, index):
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only: SQLite scans goals")
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm'")
        if cursor.fetchone() is None:
            pytest.skip("this PostgreSQL has no pg_trgm (postgresql-contrib)")
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [index])
        row = cursor.fetchone()
    assert row and "gin_trgm_ops" in row[0]
