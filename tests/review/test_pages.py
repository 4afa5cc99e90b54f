"""The review panel in the trace: what it shows, its forms (htmx and plain), and who may use them."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

from core.roles import REVIEWER, ROLE_PERMISSIONS
from review.models import Annotation, IncidentSummary, Score

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


class TestPanel:
    def test_the_trace_page_loads_the_panel_and_the_attempt_detail_its_own(self, client_for, viewer, finished_run,
                                                                             attempt):
        client = client_for(viewer)
        trace = client.get(f"/runs/{finished_run.pk}/").content.decode()
        assert f'hx-get="/review/runs/{finished_run.pk}/"' in trace
        detail = client.get(f"/runs/{finished_run.pk}/attempts/{attempt.uid}/").content.decode()
        assert f"/review/runs/{finished_run.pk}/?attempt={attempt.uid}" in detail

    def test_a_viewer_reads_the_panel_without_forms(self, client_for, viewer, finished_run, configs):
        body = client_for(viewer).get(f"/review/runs/{finished_run.pk}/", **HTMX).content.decode()
        assert 'id="review-panel"' in body and "No scores yet." in body
        assert "<form" not in body

    def test_a_reviewer_scores_comments_and_writes_the_incident_from_the_panel(self, client_for, reviewer, operator,
                                                                                finished_run, attempt, configs):
        client = client_for(reviewer)
        url = f"/review/runs/{finished_run.pk}/"
        body = client.get(url, **HTMX).content.decode()
        assert 'aria-label="Score helpful"' in body and "How helpful the run was, 1 to 5." in body
        scored = client.post(f"{url}scores/", {"config": configs["helpful"].pk, "value": "4", "comment": "ok"}, **HTMX)
        assert scored.status_code == 200 and "<td>4</td>" in scored.content.decode()
        client.post(f"{url}scores/", {"config": configs["safe"].pk, "value": "no", "attempt": attempt.uid}, **HTMX)
        client.post(f"{url}comments/", {"body": "Look at **this**, @otto"}, **HTMX)
        client.post(f"{url}incident/", {"status": "mitigated", "root_cause": "planner", "owner": "otto",
                                        "links": "https://tickets.example/T-9\n", "summary": "retried"}, **HTMX)
        assert Score.objects.get(config=configs["safe"]).attempt == attempt
        assert Annotation.objects.get().mentions.get() == operator
        assert IncidentSummary.objects.get().links == ["https://tickets.example/T-9"]
        body = client.get(url, **HTMX).content.decode()
        assert "<strong>this</strong>" in body and '<span class="mention">@otto</span>' in body
        assert "On attempts" in body and "mitigated" in body
        on_attempt = client.get(f"{url}?attempt={attempt.uid}", **HTMX).content.decode()
        assert "Review of this attempt" in on_attempt and "<td>no</td>" in on_attempt

    def test_its_author_edits_a_comment_in_the_panel_and_nobody_else(self, client_for, reviewer, operator,
                                                                       finished_run, attempt):
        from review import services

        mine = services.annotation_add(user=reviewer, run=finished_run, body="first", attempt_uid=attempt.uid)
        client = client_for(reviewer)
        run_panel = client.get(f"/review/runs/{finished_run.pk}/", **HTMX).content.decode()
        assert f'action="/review/comments/{mine.pk}/"' in run_panel
        # Edited from the run's panel: the run's panel comes back.
        edited = client.post(f"/review/comments/{mine.pk}/", {"body": "second *take*"}, **HTMX).content.decode()
        assert 'id="review-panel"' in edited and "second <em>take</em>" in edited
        # From the attempt's panel: the attempt's.
        edited = client.post(f"/review/comments/{mine.pk}/", {"body": "third", "attempt": attempt.uid},
                             **HTMX).content.decode()
        assert f'id="review-attempt-{attempt.uid}"' in edited and "third" in edited
        other = client_for(operator)
        assert f"/review/comments/{mine.pk}/" not in other.get(f"/review/runs/{finished_run.pk}/", **HTMX).content.decode()
        assert other.post(f"/review/comments/{mine.pk}/", {"body": "mine"}, **HTMX).status_code == 403
        assert Annotation.objects.get(pk=mine.pk).body == "third"

    def test_with_no_config_to_score_with_it_says_where_to_add_one(self, client_for, reviewer, finished_run):
        body = client_for(reviewer).get(f"/review/runs/{finished_run.pk}/", **HTMX).content.decode()
        assert "No score configs to score with yet" in body

    def test_a_refused_write_answers_the_panel_with_the_reason(self, client_for, reviewer, finished_run, configs):
        response = client_for(reviewer).post(f"/review/runs/{finished_run.pk}/scores/",
                                             {"config": configs["helpful"].pk, "value": "11"}, **HTMX)
        assert response.status_code == 400 and "helpful takes at most 5" in response.content.decode()
        response = client_for(reviewer).post(f"/review/runs/{finished_run.pk}/incident/",
                                             {"status": "open", "links": "javascript:alert(1)"}, **HTMX)
        assert response.status_code == 400 and "http(s) URL" in response.content.decode()

    @pytest.mark.parametrize("form", [{"body": "a\x00b"}, {"body": "ok", "attempt": "\x00"}])
    def test_a_nul_character_is_a_400_not_a_500(self, client_for, reviewer, finished_run, form):
        response = client_for(reviewer).post(f"/review/runs/{finished_run.pk}/comments/", form, **HTMX)
        assert response.status_code in (400, 404) and not Annotation.objects.exists()
        response = client_for(reviewer).post(f"/review/runs/{finished_run.pk}/incident/",
                                             {"status": "open", "owner": "ot\x00to", "links": "https://a.example/\x00"},
                                             **HTMX)
        assert response.status_code == 400 and not IncidentSummary.objects.exists()

    def test_a_plain_form_goes_back_to_the_trace(self, client_for, reviewer, finished_run):
        response = client_for(reviewer).post(f"/review/runs/{finished_run.pk}/comments/", {"body": "plain"})
        assert response.status_code == 302 and response["Location"] == f"/runs/{finished_run.pk}/"

    def test_a_viewer_may_not_post(self, client_for, viewer, finished_run, configs):
        response = client_for(viewer).post(f"/review/runs/{finished_run.pk}/comments/", {"body": "x"})
        assert response.status_code == 403 and not Annotation.objects.exists()

    def test_an_unknown_run_or_attempt_is_a_404(self, client_for, reviewer, finished_run):
        assert client_for(reviewer).get("/review/runs/999999/").status_code == 404
        assert client_for(reviewer).get(f"/review/runs/{finished_run.pk}/?attempt=nope").status_code == 404


class TestReviewerRole:
    def test_a_reviewer_may_review_but_not_start_cancel_or_approve(self, reviewer):
        assert reviewer.has_perm("review.review_runs") and reviewer.has_perm("runs.view_run")
        for perm in ("runs.start_run", "runs.cancel_run", "runs.decide_approval", "review.manage_review_settings"):
            assert not reviewer.has_perm(perm), perm

    def test_the_reviewer_group_holds_what_the_roles_say(self, roles):
        names = {f"{p.content_type.app_label}.{p.codename}"
                 for p in Group.objects.get(name=REVIEWER).permissions.select_related("content_type")}
        assert names == set(ROLE_PERMISSIONS[REVIEWER])

    def test_a_reviewer_cannot_start_a_run_on_the_page(self, client_for, reviewer):
        assert client_for(reviewer).get("/runs/start/").status_code == 403


class TestSettingsPage:
    def test_an_admin_adds_and_disables_configs_and_root_causes(self, client_for, registry_admin):
        client = client_for(registry_admin)
        page = client.get("/review/settings/").content.decode()
        assert "completion_verified" in page and "planner" in page
        assert client.post("/review/settings/", {"what": "config", "name": "tone", "kind": "categorical",
                                                 "categories": "calm, rude"}).status_code == 302
        from review.models import RootCauseCategory, ScoreConfig
        tone = ScoreConfig.objects.get(name="tone")
        assert tone.categories == ["calm", "rude"]
        client.post("/review/settings/", {"what": "config", "id": tone.pk, "toggle": "1"})
        assert not ScoreConfig.objects.get(name="tone").enabled
        client.post("/review/settings/", {"what": "root_cause", "name": "dns"})
        dns = RootCauseCategory.objects.get(name="dns")
        client.post("/review/settings/", {"what": "root_cause", "id": dns.pk})
        assert not RootCauseCategory.objects.get(name="dns").enabled

    def test_bad_input_is_a_400_with_the_reason(self, client_for, registry_admin):
        response = client_for(registry_admin).post("/review/settings/", {"what": "config", "name": "n",
                                                                         "kind": "numeric", "min_value": "abc"})
        assert response.status_code == 400 and "is not a number" in response.content.decode()

    def test_a_reviewer_reads_it_but_may_not_change_it(self, client_for, reviewer):
        client = client_for(reviewer)
        assert client.get("/review/settings/").status_code == 200
        assert client.post("/review/settings/", {"what": "root_cause", "name": "x"}).status_code == 403


def test_the_panel_reads_in_a_fixed_number_of_queries(finished_run, attempt, reviewer, operator, configs):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from review import selectors, services

    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            selectors.review_panel(run=finished_run)
        return len(queries)

    services.annotation_add(user=reviewer, run=finished_run, body="one @otto")
    few = count()
    for n in range(20):
        services.annotation_add(user=reviewer, run=finished_run, body=f"more {n} @otto", attempt_uid=attempt.uid)
    services.score_set(user=reviewer, run=finished_run, config="helpful", value=3, attempt_uid=attempt.uid)
    services.score_set(user=operator, run=finished_run, config="helpful", value=4)
    assert count() == few


def test_the_runtime_scores_cost_three_queries(finished_run, django_assert_num_queries):
    from review import autoscores

    autoscores.builtin_configs()
    with django_assert_num_queries(3):  # the run, the configs, one insert
        autoscores.run_scores_write(run_id=finished_run.pk)
