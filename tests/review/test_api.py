"""Every review endpoint: what it answers, what it refuses (bad input: a 400 naming the field), and who may."""
from __future__ import annotations

import pytest

from core.models import AuditEvent
from review.models import Annotation, IncidentSummary, RootCauseCategory, Score, ScoreConfig

pytestmark = pytest.mark.django_db


def _scores_url(run):
    return f"/api/review/runs/{run.pk}/scores/"


class TestScoreConfigsApi:
    def test_it_lists_the_runtime_configs_to_any_reader(self, api_for, viewer):
        response = api_for(viewer).get("/api/review/score-configs/")
        assert response.status_code == 200
        builtin = {c["name"] for c in response.json() if c["builtin"]}
        assert builtin == {"completion_verified", "stalled", "budget_stop", "side_effects_committed", "cost"}

    def test_a_registry_admin_creates_edits_and_deletes_a_config(self, api_for, registry_admin):
        api = api_for(registry_admin)
        created = api.post("/api/review/score-configs/", {"name": "tone", "kind": "categorical",
                                                          "categories": ["calm", "rude"], "description": "How it spoke"},
                           format="json")
        assert created.status_code == 201, created.json()
        config_id = created.json()["id"]
        edited = api.put(f"/api/review/score-configs/{config_id}/", {"name": "tone", "kind": "categorical",
                                                                     "categories": ["calm", "rude", "odd"]}, format="json")
        assert edited.status_code == 200 and edited.json()["categories"] == ["calm", "rude", "odd"]
        assert AuditEvent.objects.filter(action="score_config.saved", target_id=str(config_id)).count() == 2
        assert api.get(f"/api/review/score-configs/{config_id}/").json()["name"] == "tone"
        assert api.delete(f"/api/review/score-configs/{config_id}/").status_code == 204
        assert not ScoreConfig.objects.filter(pk=config_id).exists()

    @pytest.mark.parametrize("body, field", [
        ({"name": "x", "kind": "numeric", "min_value": 5, "max_value": 1}, "max_value"),
        ({"name": "x", "kind": "categorical", "categories": []}, "categories"),
        ({"name": "x", "kind": "categorical", "categories": ["a", "a"]}, "categories"),
        ({"name": "x", "kind": "boolean", "categories": ["a"]}, "categories"),
        ({"name": "x", "kind": "boolean", "min_value": 0}, "min_value"),
        ({"name": "x", "kind": "stars"}, "kind"),
        ({"name": "", "kind": "boolean"}, "name"),
        ({"name": "stalled", "kind": "boolean"}, "name"),
        ({"name": "x", "kind": "boolean", "colour": "red"}, "colour"),
    ])
    def test_a_bad_config_is_a_400_naming_the_field(self, api_for, registry_admin, body, field):
        response = api_for(registry_admin).post("/api/review/score-configs/", body, format="json")
        assert response.status_code == 400, response.json()
        assert field in response.json()["error"]["fields"]

    def test_only_its_description_and_enabled_change_on_a_builtin_config(self, api_for, registry_admin):
        config = ScoreConfig.objects.get(name="cost")
        url = f"/api/review/score-configs/{config.pk}/"
        api = api_for(registry_admin)
        same = {"name": "cost", "kind": "numeric", "min_value": 0, "max_value": None, "categories": []}
        assert api.put(url, {**same, "enabled": False, "description": "spend"}, format="json").status_code == 200
        assert api.put(url, {**same, "kind": "boolean", "min_value": None}, format="json").status_code == 400
        assert api.delete(url).status_code == 409

    def test_a_config_with_scores_keeps_its_kind_and_cannot_be_deleted(self, api_for, registry_admin, reviewer,
                                                                       finished_run, configs):
        api_for(reviewer).post(_scores_url(finished_run), {"config": "safe", "value": True}, format="json")
        url = f"/api/review/score-configs/{configs['safe'].pk}/"
        api = api_for(registry_admin)
        changed = api.put(url, {"name": "safe", "kind": "numeric"}, format="json")
        assert changed.status_code == 409 and changed.json()["error"]["code"] == "conflict"
        assert api.delete(url).status_code == 409

    @pytest.mark.parametrize("who", ["viewer", "operator", "reviewer"])
    def test_only_a_review_settings_admin_may_change_configs(self, api_for, request, who, configs):
        api = api_for(request.getfixturevalue(who))
        assert api.post("/api/review/score-configs/", {"name": "x", "kind": "boolean"}, format="json").status_code == 403
        assert api.delete(f"/api/review/score-configs/{configs['safe'].pk}/").status_code == 403

    def test_it_needs_a_signed_in_user(self, client):
        assert client.get("/api/review/score-configs/").status_code in (401, 403)


class TestRootCausesApi:
    def test_an_admin_manages_the_list(self, api_for, registry_admin):
        api = api_for(registry_admin)
        names = {c["name"] for c in api.get("/api/review/root-causes/").json()}
        assert "planner" in names
        created = api.post("/api/review/root-causes/", {"name": "dns", "description": "names did not resolve"},
                           format="json")
        assert created.status_code == 201
        url = f"/api/review/root-causes/{created.json()['id']}/"
        assert api.put(url, {"name": "dns", "enabled": False}, format="json").json()["enabled"] is False
        assert api.get(url).status_code == 200
        assert api.delete(url).status_code == 204
        assert api.post("/api/review/root-causes/", {"name": "planner"}, format="json").status_code == 400

    def test_a_category_in_use_is_disabled_not_deleted(self, api_for, registry_admin, reviewer, finished_run):
        api_for(reviewer).put(f"/api/review/runs/{finished_run.pk}/incident/", {"root_cause": "planner"},
                              format="json")
        category = RootCauseCategory.objects.get(name="planner")
        assert api_for(registry_admin).delete(f"/api/review/root-causes/{category.pk}/").status_code == 409

    def test_a_reviewer_may_not_change_the_list(self, api_for, reviewer):
        assert api_for(reviewer).post("/api/review/root-causes/", {"name": "x"}, format="json").status_code == 403


class TestScoresApi:
    def test_a_reviewer_scores_a_run_and_an_attempt(self, api_for, reviewer, finished_run, attempt, configs):
        api = api_for(reviewer)
        run_score = api.post(_scores_url(finished_run), {"config": "helpful", "value": 4, "comment": "fine"},
                             format="json")
        assert run_score.status_code == 201, run_score.json()
        body = run_score.json()
        assert body["value"] == 4 and body["author"] == "rené" and body["source"] == "person" and body["attempt"] is None
        on_attempt = api.post(_scores_url(finished_run), {"config": "verdict", "value": "bad", "attempt": attempt.uid},
                              format="json")
        assert on_attempt.status_code == 201 and on_attempt.json()["attempt"] == attempt.uid
        listed = api_for(reviewer).get(_scores_url(finished_run)).json()
        assert listed["count"] == 2 and [s["config"] for s in listed["results"]] == ["helpful", "verdict"]
        assert [s["config"] for s in api.get(_scores_url(finished_run), {"attempt": "run"}).json()["results"]] \
            == ["helpful"]
        assert api.get(_scores_url(finished_run), {"attempt": attempt.uid, "config": "verdict"}).json()["count"] == 1
        assert api.get(_scores_url(finished_run), {"source": "runtime"}).json()["count"] == 0
        assert api.get(_scores_url(finished_run), {"colour": "red"}).status_code == 400

    def test_scoring_again_edits_the_score_with_an_audit_row(self, api_for, reviewer, finished_run, configs):
        api = api_for(reviewer)
        first = api.post(_scores_url(finished_run), {"config": "safe", "value": True}, format="json").json()
        again = api.post(_scores_url(finished_run), {"config": "safe", "value": False, "comment": "it wrote"},
                         format="json")
        assert again.status_code == 200 and again.json()["id"] == first["id"] and again.json()["value"] is False
        event = AuditEvent.objects.get(action="score.edited", target_id=str(first["id"]))
        assert event.details["before"] == {"value": True, "comment": ""} and event.details["after"]["value"] is False
        assert event.actor == reviewer

    def test_its_author_edits_a_score_by_patch_and_nobody_else_may(self, api_for, reviewer, operator, finished_run,
                                                                     configs):
        score = api_for(reviewer).post(_scores_url(finished_run), {"config": "helpful", "value": 2},
                                       format="json").json()
        url = f"/api/review/scores/{score['id']}/"
        assert api_for(reviewer).patch(url, {"value": 5}, format="json").json()["value"] == 5
        assert api_for(operator).patch(url, {"value": 1}, format="json").status_code == 403
        assert api_for(reviewer).patch(url, {"value": 9}, format="json").status_code == 400
        assert api_for(reviewer).get(url).json()["value"] == 5

    def test_code_scores_under_its_own_name(self, api_for, operator, finished_run, configs):
        api = api_for(operator)
        response = api.post(_scores_url(finished_run), {"config": "helpful", "value": 3, "source": "code",
                                                        "source_name": "judge-v2"}, format="json")
        assert response.status_code == 201 and response.json()["source"] == "code"
        assert response.json()["source_name"] == "judge-v2"
        # The same user by hand is another author: a second score, not an edit of the code's.
        assert api.post(_scores_url(finished_run), {"config": "helpful", "value": 1}, format="json").status_code == 201
        assert api.post(_scores_url(finished_run), {"config": "helpful", "value": 3, "source": "code"},
                        format="json").status_code == 400

    @pytest.mark.parametrize("body, field", [
        ({"config": "helpful", "value": 6}, "value"),            # out of range
        ({"config": "helpful", "value": 0.5}, "value"),
        ({"config": "helpful", "value": "4"}, "value"),          # wrong type
        ({"config": "helpful", "value": True}, "value"),
        ({"config": "verdict", "value": "great"}, "value"),      # unknown category
        ({"config": "verdict", "value": 1}, "value"),
        ({"config": "safe", "value": "yes"}, "value"),
        ({"config": "safe", "value": None}, "value"),
        ({"config": "nope", "value": 1}, "config"),              # unknown config
        ({"config": "stalled", "value": True}, "config"),        # the runtime's own
        ({"config": "safe", "value": True, "attempt": "zzz"}, "attempt"),
        ({"config": "safe", "value": True, "comment": "x" * 2001}, "comment"),
        ({"config": "safe", "value": True, "stars": 3}, "stars"),
        ({"value": True}, "config"),
    ])
    def test_bad_scores_are_a_400_naming_the_field(self, api_for, reviewer, finished_run, configs, body, field):
        response = api_for(reviewer).post(_scores_url(finished_run), body, format="json")
        assert response.status_code == 400, response.json()
        assert field in response.json()["error"]["fields"], response.json()
        assert not Score.objects.filter(source="person").exists()

    def test_a_disabled_config_takes_no_new_scores(self, api_for, reviewer, finished_run, configs):
        ScoreConfig.objects.filter(name="safe").update(enabled=False)
        response = api_for(reviewer).post(_scores_url(finished_run), {"config": "safe", "value": True}, format="json")
        assert response.status_code == 400 and "disabled" in response.json()["error"]["message"]

    def test_a_score_stays_readable_after_its_category_is_removed(self, api_for, reviewer, registry_admin,
                                                                  finished_run, configs):
        api_for(reviewer).post(_scores_url(finished_run), {"config": "verdict", "value": "unclear"}, format="json")
        api_for(registry_admin).put(f"/api/review/score-configs/{configs['verdict'].pk}/",
                                    {"name": "verdict", "kind": "categorical", "categories": ["good", "bad"]},
                                    format="json")
        score = api_for(reviewer).get(_scores_url(finished_run)).json()["results"][0]
        assert score["value"] == "unclear" and score["stale"] is True

    @pytest.mark.parametrize("who, status", [("viewer", 403), ("nobody", 403), ("reviewer", 201), ("operator", 201)])
    def test_who_may_score(self, api_for, request, finished_run, configs, who, status):
        response = api_for(request.getfixturevalue(who)).post(_scores_url(finished_run),
                                                               {"config": "safe", "value": True}, format="json")
        assert response.status_code == status

    def test_a_viewer_reads_scores(self, api_for, viewer, finished_run):
        assert api_for(viewer).get(_scores_url(finished_run)).status_code == 200

    def test_an_unknown_run_is_a_404(self, api_for, reviewer, configs):
        assert api_for(reviewer).post("/api/review/runs/999999/scores/", {"config": "safe", "value": True},
                                      format="json").status_code == 404
        assert api_for(reviewer).get("/api/review/scores/999999/").status_code == 404


class TestAnnotationsApi:
    def test_a_reviewer_comments_with_markdown_and_a_mention(self, api_for, reviewer, operator, finished_run, attempt):
        api = api_for(reviewer)
        response = api.post(f"/api/review/runs/{finished_run.pk}/annotations/",
                            {"body": "**Root cause**: the search index. cc @otto", "attempt": attempt.uid}, format="json")
        assert response.status_code == 201, response.json()
        body = response.json()
        assert body["mentions"] == ["otto"] and body["attempt"] == attempt.uid
        assert "<strong>Root cause</strong>" in body["html"] and '<span class="mention">@otto</span>' in body["html"]
        listed = api.get(f"/api/review/runs/{finished_run.pk}/annotations/").json()
        assert listed["count"] == 1

    def test_its_author_edits_a_comment_with_an_audit_row(self, api_for, reviewer, operator, finished_run):
        created = api_for(reviewer).post(f"/api/review/runs/{finished_run.pk}/annotations/", {"body": "first"},
                                         format="json").json()
        url = f"/api/review/annotations/{created['id']}/"
        assert api_for(reviewer).patch(url, {"body": "second"}, format="json").json()["body"] == "second"
        assert AuditEvent.objects.get(action="annotation.edited").details["before"] == "first"
        assert api_for(operator).patch(url, {"body": "mine now"}, format="json").status_code == 403
        assert api_for(reviewer).patch(url, {"body": "  "}, format="json").status_code == 400
        assert api_for(reviewer).get(url).json()["body"] == "second"

    @pytest.mark.parametrize("body, field", [
        ({"body": ""}, "body"), ({"body": "   "}, "body"), ({"body": "x" * 10_001}, "body"),
        ({"body": "hi", "attempt": "nope"}, "attempt"), ({"text": "hi"}, "text"), ({"body": ["hi"]}, "body"),
    ])
    def test_a_bad_comment_is_a_400(self, api_for, reviewer, finished_run, body, field):
        response = api_for(reviewer).post(f"/api/review/runs/{finished_run.pk}/annotations/", body, format="json")
        assert response.status_code == 400 and field in response.json()["error"]["fields"], response.json()
        assert not Annotation.objects.exists()

    def test_a_viewer_reads_but_may_not_comment(self, api_for, viewer, finished_run):
        api = api_for(viewer)
        assert api.get(f"/api/review/runs/{finished_run.pk}/annotations/").status_code == 200
        assert api.post(f"/api/review/runs/{finished_run.pk}/annotations/", {"body": "x"},
                        format="json").status_code == 403


class TestIncidentApi:
    def test_a_reviewer_writes_and_updates_the_incident_summary(self, api_for, reviewer, operator, finished_run):
        url = f"/api/review/runs/{finished_run.pk}/incident/"
        api = api_for(reviewer)
        assert api.get(url).status_code == 404
        saved = api.put(url, {"status": "open", "root_cause": "planner", "owner": "otto",
                              "summary": "The planner *repeated* itself.", "links": ["https://tickets.example/T-1"]},
                        format="json")
        assert saved.status_code == 200, saved.json()
        assert saved.json()["root_cause"] == "planner" and saved.json()["owner"] == "otto"
        assert "<em>repeated</em>" in saved.json()["html"]
        resolved = api.put(url, {"status": "resolved", "root_cause": "planner"}, format="json").json()
        assert resolved["status"] == "resolved" and resolved["owner"] is None
        assert IncidentSummary.objects.count() == 1
        event = AuditEvent.objects.filter(action="incident.saved").first()
        assert event.details["before"]["status"] == "open" and event.details["after"]["status"] == "resolved"
        assert api_for(operator).get(url).json()["status"] == "resolved"

    @pytest.mark.parametrize("body, field", [
        ({"status": "closed"}, "status"),
        ({"root_cause": "gremlins"}, "root_cause"),
        ({"owner": "nobody-by-this-name"}, "owner"),
        ({"links": ["javascript:alert(1)"]}, "links"),
        ({"links": ["ftp://files.example/x"]}, "links"),
        ({"links": ["not a url"]}, "links"),
        ({"links": "https://a.example"}, "links"),
        ({"links": ["https://a.example"] * 21}, "links"),
        ({"summary": "x" * 10_001}, "summary"),
        ({"severity": "high"}, "severity"),
    ])
    def test_a_bad_incident_summary_is_a_400(self, api_for, reviewer, finished_run, body, field):
        response = api_for(reviewer).put(f"/api/review/runs/{finished_run.pk}/incident/", body, format="json")
        assert response.status_code == 400 and field in response.json()["error"]["fields"], response.json()

    def test_a_disabled_category_stays_on_the_incidents_that_have_it(self, api_for, reviewer, finished_run):
        url = f"/api/review/runs/{finished_run.pk}/incident/"
        api_for(reviewer).put(url, {"root_cause": "planner"}, format="json")
        RootCauseCategory.objects.filter(name="planner").update(enabled=False)
        assert api_for(reviewer).put(url, {"root_cause": "planner", "status": "mitigated"},
                                     format="json").status_code == 200

    def test_a_viewer_reads_but_may_not_write_it(self, api_for, viewer, reviewer, finished_run):
        url = f"/api/review/runs/{finished_run.pk}/incident/"
        api_for(reviewer).put(url, {"status": "open"}, format="json")
        assert api_for(viewer).get(url).status_code == 200
        assert api_for(viewer).put(url, {"status": "resolved"}, format="json").status_code == 403


class TestDeletedRun:
    def test_deleting_a_run_deletes_its_review_and_keeps_the_audit_rows(self, api_for, reviewer, finished_run, configs):
        api = api_for(reviewer)
        score = api.post(_scores_url(finished_run), {"config": "safe", "value": True}, format="json").json()
        api.post(_scores_url(finished_run), {"config": "safe", "value": False}, format="json")
        api.post(f"/api/review/runs/{finished_run.pk}/annotations/", {"body": "x"}, format="json")
        api.put(f"/api/review/runs/{finished_run.pk}/incident/", {"status": "open"}, format="json")
        finished_run.delete()
        assert not Score.objects.exists() and not Annotation.objects.exists() and not IncidentSummary.objects.exists()
        assert AuditEvent.objects.filter(action="score.edited", target_id=str(score["id"])).exists()
        assert api.get(f"/api/review/scores/{score['id']}/").status_code == 404


def test_the_audit_log_links_review_rows_to_their_pages(api_for, registry_admin, reviewer, finished_run, configs):
    from core.audit_log import AuditFilters, audit_page

    api_for(registry_admin).post("/api/review/root-causes/", {"name": "dns"}, format="json")
    api_for(reviewer).put(f"/api/review/runs/{finished_run.pk}/incident/", {"status": "open"}, format="json")
    rows = {row.action: row.object_url for row in audit_page(filters=AuditFilters()).object_list}
    assert rows["incident.saved"] == f"/runs/{finished_run.pk}/"
    assert rows["root_cause.saved"].startswith("/review/settings/#root-cause-")
