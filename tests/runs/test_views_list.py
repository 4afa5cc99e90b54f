"""The runs list: who may see it, filters, sorting, pagination, live refresh, escaping."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone


class TestRunList:
    url = "/runs/"

    def test_it_redirects_anonymous_users_to_login(self, client, db):
        response = client.get(self.url)
        assert response.status_code == 302
        assert response["Location"].startswith("/login/")

    def test_it_refuses_users_without_view_permission(self, client_for, nobody):
        response = client_for(nobody).get(self.url)
        assert response.status_code == 403
        assert b"You do not have permission to view runs." in response.content

    def test_it_lists_runs_for_a_viewer_without_the_start_button(self, client_for, viewer, make_run):
        make_run(goal="Find the travel policy")
        response = client_for(viewer).get(self.url)
        assert response.status_code == 200
        assert b"Find the travel policy" in response.content
        assert b"Start a run" not in response.content

    def test_it_shows_the_start_button_to_operators(self, client_for, operator, make_run):
        response = client_for(operator).get(self.url)
        assert b'href="/runs/start/"' in response.content
        assert client_for(operator).get("/runs/start/").status_code == 200

    def test_it_shows_an_empty_state(self, client_for, viewer):
        response = client_for(viewer).get(self.url)
        assert b"No runs yet." in response.content

    def test_it_says_when_no_run_matches_the_filters(self, client_for, viewer, make_run):
        make_run()
        response = client_for(viewer).get(self.url, {"status": "completed"})
        assert b"No runs match these filters." in response.content

    def test_it_filters_by_status_stop_reason_owner_and_planner(self, client_for, viewer, operator,
                                                                  second_operator, make_run):
        make_run(goal="alpha-running", status="running")
        make_run(goal="beta-stalled", status="stopped", stop_reason="stalled")
        make_run(goal="gamma-deadline", status="stopped", stop_reason="budget_exhausted:deadline",
                 owner=second_operator, planner="rules")
        client = client_for(viewer)

        def goals(**params):
            body = client.get(self.url, params).content.decode()
            return {g for g in ("alpha-running", "beta-stalled", "gamma-deadline") if g in body}

        assert goals(status="stopped") == {"beta-stalled", "gamma-deadline"}
        assert goals(stop_reason="budget_exhausted:deadline") == {"gamma-deadline"}
        assert goals(owner="olga") == {"gamma-deadline"}
        assert goals(planner="scripted") == {"alpha-running", "beta-stalled"}

    def test_it_filters_by_capability_used(self, client_for, viewer, make_run, make_revision, make_step,
                                           make_attempt, make_capability):
        make_capability("create_ticket")
        used = make_run(goal="used-ticket")
        make_attempt(make_step(make_revision(used), capability="create_ticket"))
        other = make_run(goal="only-search")
        make_attempt(make_step(make_revision(other)))
        body = client_for(viewer).get(self.url, {"capability": "create_ticket"}).content.decode()
        assert "used-ticket" in body and "only-search" not in body

    def test_it_filters_by_creation_time(self, client_for, viewer, make_run):
        now = timezone.now()
        make_run(goal="old-run", created_at=now - timedelta(days=3))
        make_run(goal="new-run", created_at=now - timedelta(hours=1))
        since = (now - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
        body = client_for(viewer).get(self.url, {"created_from": since}).content.decode()
        assert "new-run" in body and "old-run" not in body
        body = client_for(viewer).get(self.url, {"created_to": since}).content.decode()
        assert "old-run" in body and "new-run" not in body

    def test_it_sorts_by_tokens_and_cost(self, client_for, viewer, make_run):
        make_run(goal="few-tokens", tokens=10, cost=0.5, status="completed")
        make_run(goal="many-tokens", tokens=900, cost=0.1, status="completed")
        client = client_for(viewer)
        body = client.get(self.url, {"sort": "-tokens"}).content.decode()
        assert body.index("many-tokens") < body.index("few-tokens")
        body = client.get(self.url, {"sort": "-cost"}).content.decode()
        assert body.index("few-tokens") < body.index("many-tokens")

    def test_it_keeps_filters_in_pagination_links(self, client_for, viewer, make_run):
        for i in range(55):
            make_run(goal=f"run-{i}", status="stopped", stop_reason="stalled")
        response = client_for(viewer).get(self.url, {"status": "stopped", "sort": "-tokens"})
        body = response.content.decode()
        assert "Page 1 of 2" in body
        assert 'href="?status=stopped&amp;sort=-tokens&amp;page=2&amp;after=' in body
        page2 = client_for(viewer).get(self.url, {"status": "stopped", "page": 2}).content.decode()
        assert "Page 2 of 2" in page2

    def test_it_returns_only_the_table_to_htmx_and_polls_while_runs_are_live(self, client_for, viewer, make_run):
        make_run(status="running")
        response = client_for(viewer).get(self.url, headers={"HX-Request": "true"})
        body = response.content.decode()
        assert body.lstrip().startswith('<div id="runs-table"')
        assert 'hx-trigger="every 3s"' in body
        assert "<html" not in body

    def test_it_stops_polling_when_no_run_on_the_page_is_live(self, client_for, viewer, make_run):
        make_run(status="completed")
        body = client_for(viewer).get(self.url).content.decode()
        assert 'hx-trigger="every 3s"' not in body

    def test_it_escapes_a_goal_with_markup(self, client_for, viewer, make_run):
        make_run(goal="<script>alert(1)</script>")
        body = client_for(viewer).get(self.url).content.decode()
        assert "<script>alert(1)</script>" not in body
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body

    @pytest.mark.parametrize("count", [1, 60])
    def test_it_issues_a_bounded_number_of_queries(self, client_for, viewer, make_run, make_revision, make_step,
                                                   make_attempt, count, django_assert_max_num_queries):
        for _ in range(count):
            run = make_run()
            make_attempt(make_step(make_revision(run)))
        client = client_for(viewer)
        with django_assert_max_num_queries(13):   # +1: the projects the user holds
            client.get(self.url, {"capability": "search_documents", "sort": "-cost"})
