"""Idempotency-Key on the requests that start a run (runs.request_keys): a retry gets the first run back.

The worker's half (a run started by a request retried, some of it at once, runs and acts once) is in
tests/runs/test_request_keys_worker.py.
"""
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from core.models import Project
from core.project_access import grant_role
from core.projects import project_scope
from core.tokens import token_create
from runs import bulk, request_keys
from runs.models import BulkAction, Run, RunRequestKey

START = {"goal": "Find the refund policy",
         "completion": {"capability": "search_documents", "path": "documents.0.id", "exists": True}}


def _start(api, body=START, key="order-17-refund", **headers):
    if key is not None:
        headers["HTTP_IDEMPOTENCY_KEY"] = key
    return api.post("/api/runs/start/", body, format="json", **headers)


@pytest.mark.django_db
class TestRunStart:
    def test_a_retry_with_the_key_answers_the_first_run_and_starts_none(
            self, operator, api_for, django_capture_on_commit_callbacks):
        api = api_for(operator)
        with django_capture_on_commit_callbacks() as first_sends:
            first = _start(api)
        with django_capture_on_commit_callbacks() as retry_sends:
            again = _start(api)
        assert first.status_code == again.status_code == 201, again.json()
        assert again.json()["id"] == first.json()["id"] and Run.objects.count() == 1
        assert "Idempotent-Replayed" not in first and again["Idempotent-Replayed"] == "true"
        assert len(first_sends) == 1 and retry_sends == []   # the retry queues no second pass

    def test_the_retry_answers_the_run_as_it_is_now(self, operator, api_for):
        api = api_for(operator)
        run_id = _start(api).json()["id"]
        Run.objects.filter(pk=run_id).update(status="completed", stop_reason="completed")
        assert _start(api).json()["status"] == "completed"

    def test_the_same_key_with_another_request_is_refused_and_starts_nothing(self, operator, api_for):
        api = api_for(operator)
        run_id = _start(api).json()["id"]
        response = _start(api, {**START, "goal": "Find the travel policy"})
        assert response.status_code == 422
        error = response.json()["error"]
        assert error["code"] == "idempotency_key_reused" and f"run {run_id}" in error["message"]
        assert Run.objects.count() == 1

    def test_defaults_filled_in_or_written_out_are_the_same_request(self, operator, api_for):
        api = api_for(operator)
        first = _start(api).json()["id"]
        spelled_out = {**START, "planner": "rules", "labels": {}, "require_plan_approval": False}
        assert _start(api, spelled_out).json()["id"] == first

    def test_without_a_key_every_request_starts_a_run(self, operator, api_for):
        api = api_for(operator)
        assert _start(api, key=None).json()["id"] != _start(api, key=None).json()["id"]

    def test_keys_are_each_user_s_own(self, operator, second_operator, api_for):
        mine, theirs = _start(api_for(operator)), _start(api_for(second_operator))
        assert mine.json()["id"] != theirs.json()["id"] and "Idempotent-Replayed" not in theirs
        assert Run.objects.count() == 2

    def test_keys_are_each_project_s_own(self, operator):
        other = Project.objects.create(slug="payments", name="Payments")
        grant_role(operator, "operator", other)
        ids = []
        for project in ("default", "payments"):   # a token acts in one project
            api = APIClient()
            api.credentials(HTTP_AUTHORIZATION=f"Token {token_create(user=operator, name=project, project=project)[1]}")
            response = _start(api)
            assert response.status_code == 201 and "Idempotent-Replayed" not in response, response.json()
            ids.append(response.json()["id"])
        with project_scope(other):
            assert list(Run.objects.values_list("pk", flat=True)) == ids[1:]

    @pytest.mark.parametrize("key", ["", "x" * 256, "naïve", "tab\there", "new\nline"])
    def test_a_key_that_is_not_one_is_a_400_and_starts_nothing(self, operator, api_for, key):
        response = _start(api_for(operator), key=key)
        assert response.status_code == 400
        assert "Idempotency-Key" in response.json()["error"]["fields"]
        assert not Run.objects.exists()

    def test_a_refused_start_keeps_no_key(self, operator, api_for):
        api = api_for(operator)
        assert _start(api, {**START, "budgets": {"deadline_s": 0}}).status_code == 400
        assert not RunRequestKey.objects.exists()
        assert _start(api).status_code == 201   # the corrected request may use the key

    def test_an_expired_key_starts_a_new_run_and_the_scheduler_forgets_old_keys(self, operator, api_for, settings):
        api = api_for(operator)
        first = _start(api).json()["id"]
        kept = _start(api, key="kept").json()["id"]
        day_ago = timezone.now() - timedelta(hours=settings.AGENTOPS_REQUEST_KEY_HOURS, minutes=1)
        RunRequestKey.objects.exclude(key="kept").update(created_at=day_ago)
        second = _start(api)
        assert second.status_code == 201 and second.json()["id"] != first
        assert "Idempotent-Replayed" not in second
        RunRequestKey.objects.update(created_at=day_ago)
        RunRequestKey.objects.filter(run_id=kept).update(created_at=timezone.now())
        assert request_keys.forget_expired() == 1
        assert list(RunRequestKey.objects.values_list("key", flat=True)) == ["kept"]

    def test_a_purged_run_takes_its_key_with_it(self, operator, api_for):
        run_id = _start(api_for(operator)).json()["id"]
        Run.objects.filter(pk=run_id).delete()
        assert not RunRequestKey.objects.exists()


@pytest.mark.django_db
class TestFork:
    def test_a_retried_fork_answers_the_first_fork(self, api_for, operator, make_run, manual_advance):
        source = make_run(owner=operator, status="stopped", stop_reason="terminal_failure:not_found",
                          planner_config={"plans": [[{"capability": "search_documents", "arguments": {"q": "x"}}]]})
        api = api_for(operator)
        first = api.post(f"/api/runs/{source.pk}/fork/", {}, format="json", HTTP_IDEMPOTENCY_KEY="resume-1")
        again = api.post(f"/api/runs/{source.pk}/fork/", {}, format="json", HTTP_IDEMPOTENCY_KEY="resume-1")
        assert first.status_code == again.status_code == 201, again.json()
        assert again.json()["id"] == first.json()["id"] and again["Idempotent-Replayed"] == "true"
        assert Run.objects.filter(forked_from=source).count() == 1

    def test_the_key_of_a_start_cannot_fork(self, api_for, operator, make_run):
        source = make_run(owner=operator, status="stopped", stop_reason="terminal_failure:not_found")
        api = api_for(operator)
        _start(api, key="shared")
        response = api.post(f"/api/runs/{source.pk}/fork/", {}, format="json", HTTP_IDEMPOTENCY_KEY="shared")
        assert response.status_code == 422 and not Run.objects.filter(forked_from=source).exists()


@pytest.mark.django_db
class TestBulk:
    """A retried bulk POST would act on every selected run again (a bulk re-run: each run forked twice)."""

    @pytest.fixture(autouse=True)
    def _no_send(self, monkeypatch):
        monkeypatch.setattr(bulk, "_send", lambda job_id, countdown=None: None)

    def test_a_retried_bulk_start_answers_the_first_job(self, api_for, operator, make_run):
        make_run(owner=operator, goal="mine a")
        api = api_for(operator)
        body = {"action": "cancel", "query": "status=active"}
        first = api.post("/api/runs/bulk/", body, format="json", HTTP_IDEMPOTENCY_KEY="cancel-all")
        again = api.post("/api/runs/bulk/", body, format="json", HTTP_IDEMPOTENCY_KEY="cancel-all")
        assert first.status_code == again.status_code == 201, again.json()
        assert again.json()["id"] == first.json()["id"] and again["Idempotent-Replayed"] == "true"
        assert BulkAction.objects.count() == 1
        other = api.post("/api/runs/bulk/", {**body, "query": "status=queued"}, format="json",
                         HTTP_IDEMPOTENCY_KEY="cancel-all")
        assert other.status_code == 422 and "bulk action" in other.json()["error"]["message"]

    def test_the_confirmation_sent_twice_opens_the_job_the_first_started(self, client_for, operator, make_run):
        make_run(owner=operator, goal="mine a")
        client = client_for(operator)
        page = client.get("/runs/bulk/", {"query": "status=active", "action": "cancel"}).content.decode()
        key = page.split('name="request_key" value="', 1)[1].split('"', 1)[0]
        confirm = {"query": "status=active", "action": "cancel", "request_key": key}
        first, again = client.post("/runs/bulk/start/", confirm), client.post("/runs/bulk/start/", confirm)
        job = BulkAction.objects.get()
        assert first["Location"] == again["Location"] == f"/runs/bulk/{job.pk}/"


def test_the_schema_documents_the_header(viewer, client_for, db):
    schema = client_for(viewer).get("/api/schema/", HTTP_ACCEPT="application/json").json()
    for path in ("/api/runs/start/", "/api/runs/{run_id}/fork/", "/api/runs/bulk/"):
        names = [p["name"] for p in schema["paths"][path]["post"].get("parameters", [])]
        assert "Idempotency-Key" in names, path

