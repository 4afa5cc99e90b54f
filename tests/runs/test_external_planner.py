"""The external planner: an agent reads what its run needs and submits plans through the API."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.models import AuditEvent
from runs import services
from runs.models import PlanRevision, PlanSubmission, Run
from runs.worker import engine, sweeps
from tests.conftest import holding_only, off_the_event_loop

ROOT = Path(__file__).resolve().parents[2]
FOUND = {"capability": "search_documents", "path": "documents.0.id", "exists": True}
SEARCH_STEP = {"id": "s1", "capability": "search_documents", "arguments": {"q": "travel"},
               "expected_outcome": "the travel policy"}


@pytest.fixture
def demo_capabilities(db):
    from capabilities.kinds.python.sync import python_capabilities_sync

    python_capabilities_sync()


def start(owner, **budgets):
    return services.run_start(owner=owner, goal="Find the travel policy", completion=FOUND, planner="external",
                              budgets={"deadline_s": 60, **budgets})


def advance(run):
    engine.run_advance(run_id=run.pk, worker="test-worker")
    run.refresh_from_db()
    return run


def planning(api, run, wait=0):
    response = off_the_event_loop(api.get, f"/api/runs/{run.pk}/planning/", {"wait": wait})
    assert response.status_code == 200, response.content
    return response.json()


def submit(api, run, revision, steps=None, **extra):
    body = {"revision": revision, **({"steps": steps} if steps is not None else {}), **extra}
    return api.post(f"/api/runs/{run.pk}/plans/", body, format="json")


# -- in-process: the worker's part is run_advance, called by the test -----------------------------

class TestPlanningApi:
    def test_a_new_run_asks_for_its_first_plan(self, api_for, operator, demo_capabilities):
        run = start(operator)
        need = planning(api_for(operator), run)
        assert need["needs_plan"] and need["revision"] == 1 and need["reason_code"] is None
        assert need["status"] == "queued" and need["stop_reason"] is None and need["observations"] == []
        names = {c["name"] for c in need["capabilities"]}
        assert {"search_documents", "create_ticket"} <= names
        search = next(c for c in need["capabilities"] if c["name"] == "search_documents")
        assert search["schema"]["properties"]["q"] and search["side_effect"] == "none"

    def test_it_lists_only_the_capabilities_the_owner_may_use(self, api_for, demo_capabilities, roles):
        from django.contrib.auth.models import User

        owner = User.objects.create_user("sam")
        holding_only(owner, "start_run", "view_run")
        run = start(owner)
        names = {c["name"] for c in planning(api_for(owner), run)["capabilities"]}
        assert "search_documents" in names and "create_ticket" not in names and "send_notification" not in names

    def test_the_run_waits_counting_nothing_until_the_plan_arrives(self, api_for, operator, demo_capabilities):
        run = advance(start(operator))
        assert run.status == "running" and run.iterations == 0 and run.revisions == 0
        assert advance(run).iterations == 0
        api = api_for(operator)
        assert submit(api, run, 1, [SEARCH_STEP], tokens=120, cost=0.002).status_code == 202
        assert planning(api, run)["needs_plan"] is False
        run = advance(run)
        assert run.status == "completed" and run.tokens == 120 and run.cost == pytest.approx(0.002)
        revision = PlanRevision.objects.get(run=run)
        assert revision.accepted and '"submitted_by": "otto"' in revision.planner_output
        assert AuditEvent.objects.filter(action="plan.submitted", actor=operator).count() == 1

    def test_a_rejected_plan_comes_back_with_its_errors_under_the_next_revision(self, api_for, operator,
                                                                                demo_capabilities):
        api = api_for(operator)
        run = advance(start(operator))
        bad = [{"id": "s1", "capability": "search_the_web", "arguments": {"q": "travel"}},
               {"id": "s2", "capability": "search_documents", "arguments": {"q": 7}}]
        submit(api, run, 1, bad)
        run = advance(run)
        need = planning(api, run)
        assert need["needs_plan"] and need["revision"] == 2 and need["reason_code"] == "plan_rejected"
        assert {e["code"] for e in need["validation_errors"]} == {"unknown_capability", "invalid_arguments"}
        assert need["previous_plan"][0]["capability"] == "search_the_web"
        # A second rejection in a row stops the run, as for any planner.
        submit(api, run, 2, bad)
        run = advance(run)
        assert run.stop_reason == "plan_rejected" and "rejected again" in run.stop_detail

    def test_no_further_plan_stops_the_run_stalled(self, api_for, operator, demo_capabilities):
        api = api_for(operator)
        run = advance(start(operator))
        assert submit(api, run, 1, no_further_plan=True, tokens=40).status_code == 202
        run = advance(run)
        assert run.stop_reason == "stalled" and run.tokens == 40

    def test_the_long_poll_waits_then_answers_unchanged(self, api_for, operator, demo_capabilities):
        api = api_for(operator)
        run = advance(start(operator))
        submit(api, run, 1, [SEARCH_STEP])
        started = time.monotonic()
        need = planning(api, run, wait=1)
        assert 0.9 < time.monotonic() - started < 3 and need["plan_submitted"] and not need["needs_plan"]

    def test_the_long_poll_answers_at_once_when_a_plan_is_needed(self, api_for, operator, demo_capabilities):
        run = start(operator)
        started = time.monotonic()
        assert planning(api_for(operator), run, wait=25)["needs_plan"]
        assert time.monotonic() - started < 1

    def test_wait_is_bounded(self, api_for, operator, demo_capabilities):
        run = start(operator)
        response = api_for(operator).get(f"/api/runs/{run.pk}/planning/", {"wait": 600})
        assert response.status_code == 400 and "wait" in response.json()["error"]["fields"]

    def test_a_viewer_may_read_it(self, api_for, operator, viewer, demo_capabilities):
        assert planning(api_for(viewer), start(operator))["needs_plan"]

    def test_an_unknown_run_is_404(self, api_for, operator):
        assert api_for(operator).get("/api/runs/999999/planning/").status_code == 404
        assert submit(api_for(operator), Run(pk=999999), 1, [SEARCH_STEP]).status_code == 404


class TestSubmissionRules:
    def test_another_plan_for_a_revision_that_has_one_is_a_conflict(self, api_for, operator, demo_capabilities):
        api = api_for(operator)
        run = start(operator)
        assert submit(api, run, 1, [SEARCH_STEP]).status_code == 202
        for other in ({"steps": [{**SEARCH_STEP, "arguments": {"q": "holiday"}}]}, {"steps": [SEARCH_STEP], "tokens": 5},
                      {"no_further_plan": True}):
            response = api.post(f"/api/runs/{run.pk}/plans/", {"revision": 1, **other}, format="json")
            assert response.status_code == 409 and "already has another plan" in response.json()["error"]["message"]
        assert PlanSubmission.objects.filter(run=run).count() == 1

    def test_the_same_submission_again_is_answered_as_the_first_and_stored_once(self, api_for, operator,
                                                                                 demo_capabilities, monkeypatch):
        """A retry after its answer was lost (the commit went through): answered as the first was, the run
        woken again (the commit's wake-up may have been lost with the answer), nothing stored twice; so
        also once the run has moved on or finished."""
        api = api_for(operator)
        run = start(operator)
        first = submit(api, run, 1, [SEARCH_STEP], tokens=10, reason="search first")
        woken = []
        monkeypatch.setattr(services, "_enqueue_advance", lambda run_id, countdown=None: woken.append(run_id))
        again = submit(api, run, 1, [SEARCH_STEP], tokens=10, reason="search first")
        assert (first.status_code, again.status_code) == (202, 202) and again.json() == first.json()
        assert woken == [run.pk] and PlanSubmission.objects.filter(run=run).count() == 1
        services.run_cancel(run_id=run.pk, user=operator)
        late = submit(api, run, 1, [SEARCH_STEP], tokens=10, reason="search first")
        assert late.status_code == 202 and late.json() == first.json() and woken == [run.pk]

    def test_a_revision_the_run_does_not_wait_for_is_a_conflict(self, api_for, operator, demo_capabilities):
        response = submit(api_for(operator), start(operator), 2, [SEARCH_STEP])
        assert response.status_code == 409 and "waits for revision 1" in response.json()["error"]["message"]

    def test_a_finished_run_takes_no_plan(self, api_for, operator, demo_capabilities):
        run = start(operator)
        services.run_cancel(run_id=run.pk, user=operator)
        assert submit(api_for(operator), run, 1, [SEARCH_STEP]).status_code == 409

    def test_a_run_with_another_planner_takes_no_plan(self, api_for, operator, demo_capabilities):
        run = services.run_start(owner=operator, goal="g", completion=FOUND, planner="rules")
        response = submit(api_for(operator), run, 1, [SEARCH_STEP])
        assert response.status_code == 409 and "rules planner" in response.json()["error"]["message"]

    @pytest.mark.parametrize("body, field", [
        ({"steps": [SEARCH_STEP]}, "revision"),
        ({"revision": 0, "steps": [SEARCH_STEP]}, "revision"),
        ({"revision": 1}, "steps"),
        ({"revision": 1, "steps": "search"}, "steps"),
        ({"revision": 1, "steps": [SEARCH_STEP], "no_further_plan": True}, "steps"),
        ({"revision": 1, "steps": [SEARCH_STEP], "tokens": -1}, "tokens"),
        ({"revision": 1, "steps": [SEARCH_STEP], "cost": -0.5}, "cost"),
        ({"revision": 1, "steps": [SEARCH_STEP], "reason_code": "plan_rejected"}, "reason_code"),
    ])
    def test_a_malformed_body_is_a_400_naming_the_field(self, api_for, operator, demo_capabilities, body, field):
        run = start(operator)
        response = api_for(operator).post(f"/api/runs/{run.pk}/plans/", body, format="json")
        assert response.status_code == 400 and field in response.json()["error"]["fields"]
        assert not PlanSubmission.objects.exists()

    def test_only_the_owner_may_submit(self, api_for, operator, second_operator, demo_capabilities):
        response = submit(api_for(second_operator), start(operator), 1, [SEARCH_STEP])
        assert response.status_code == 403 and "owner" in response.json()["error"]["message"]

    def test_a_viewer_may_not_submit(self, api_for, viewer, operator, demo_capabilities):
        assert submit(api_for(viewer), start(operator), 1, [SEARCH_STEP]).status_code == 403

    def test_an_owner_who_lost_start_run_may_not_submit(self, api_for, operator, demo_capabilities):
        run = start(operator)
        operator.project_memberships.all().delete()
        from django.contrib.auth.models import User

        assert submit(api_for(User.objects.get(pk=operator.pk)), run, 1, [SEARCH_STEP]).status_code == 403

    def test_anonymous_callers_are_refused(self, client, operator, demo_capabilities):
        run = start(operator)
        assert client.get(f"/api/runs/{run.pk}/planning/").status_code in (401, 403)
        assert client.post(f"/api/runs/{run.pk}/plans/", {}, content_type="application/json").status_code in (401,
                                                                                                              403)

    def test_the_start_api_takes_no_config_for_it(self, api_for, operator):
        response = api_for(operator).post("/api/runs/start/", {
            "goal": "g", "completion": FOUND, "planner": "external", "planner_config": {"x": 1}}, format="json")
        assert response.status_code == 400 and "planner_config" in response.json()["error"]["fields"]


class TestSweep:
    def test_it_stops_an_overdue_run_still_waiting_for_its_plan(self, operator, demo_capabilities):
        from django.utils import timezone

        run = advance(start(operator, deadline_s=5))
        assert sweeps.sweep_overdue_runs(now=timezone.now()) == 0
        assert sweeps.sweep_overdue_runs(now=timezone.now() + timezone.timedelta(seconds=6)) == 1
        run.refresh_from_db()
        assert run.status == "stopped" and run.stop_reason == "budget_exhausted:deadline"
        assert "waiting for the external agent's plan for revision 1" in run.stop_detail

    def test_it_wakes_a_run_whose_plan_arrived_while_nobody_advanced_it(self, operator, demo_capabilities,
                                                                        monkeypatch):
        from runs import tasks

        woken = []
        monkeypatch.setattr(tasks.advance_run, "apply_async", lambda args, **kw: woken.append(args[0]))
        run = advance(start(operator))
        assert sweeps.sweep_overdue_runs() == 0 and woken == []
        PlanSubmission.objects.create(run=run, revision=1, plan=[SEARCH_STEP], submitted_by=operator)
        sweeps.sweep_overdue_runs()
        assert woken == [run.pk]
        advance(run)
        woken.clear()
        sweeps.sweep_overdue_runs()
        assert woken == []


# -- end to end: a real worker process advances the runs ------------------------------------------

def status_of(run_id):
    return Run.objects.values_list("status", flat=True).get(pk=run_id)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
class TestWithAWorker:
    def test_an_agent_corrects_a_rejected_plan_and_the_run_completes(self, celery_worker, api_for, operator,
                                                                       demo_capabilities, wait_until):
        api = api_for(operator)
        response = api.post("/api/runs/start/", {"goal": "Find the travel policy", "completion": FOUND,
                                                 "planner": "external", "budgets": {"deadline_s": 120}},
                            format="json")
        assert response.status_code == 201
        run = Run.objects.get(pk=response.json()["id"])
        need = wait_until(lambda: (n := planning(api, run, wait=5))["needs_plan"] and n, message="the first ask")
        assert need["revision"] == 1
        invalid = [{"id": "s1", "capability": "search_documents", "arguments": {"query": "travel"}}]
        assert submit(api, run, 1, invalid, tokens=300).status_code == 202
        need = wait_until(lambda: (n := planning(api, run, wait=5))["needs_plan"] and n,
                          message="the rejection to come back")
        assert need["revision"] == 2 and need["reason_code"] == "plan_rejected"
        assert {e["code"] for e in need["validation_errors"]} == {"invalid_arguments"}
        assert submit(api, run, 1, [SEARCH_STEP]).status_code == 409
        assert submit(api, run, 2, [SEARCH_STEP], tokens=200, reason="use q").status_code == 202
        # The same again, as a client retries a submission whose answer it lost: counted once.
        assert submit(api, run, 2, [SEARCH_STEP], tokens=200, reason="use q").status_code == 202
        wait_until(lambda: status_of(run.pk) == "completed", message="completion")
        run.refresh_from_db()
        assert run.stop_reason == "completed" and run.revisions == 2 and run.tokens == 500
        revisions = api.get(f"/api/runs/{run.pk}/revisions/").json()
        assert [r["accepted"] for r in revisions] == [False, True]
        attempts = api.get(f"/api/runs/{run.pk}/attempts/").json()["results"]
        assert attempts[0]["capability"] == "search_documents" and attempts[0]["observation"]["status"] == "ok"
        assert planning(api, run)["stop_reason"] == "completed"

    def test_a_run_whose_agent_never_answers_is_stopped_by_the_deadline_sweep(self, celery_worker, operator,
                                                                              demo_capabilities, wait_until):
        from runs.tasks import sweep_overdue_runs

        run = start(operator, deadline_s=2)
        wait_until(lambda: status_of(run.pk) == "running", message="the worker to take the run")
        time.sleep(2.2)
        sweep_overdue_runs.delay()          # what the beat schedule does every few seconds
        wait_until(lambda: status_of(run.pk) == "stopped", message="the sweep")
        run.refresh_from_db()
        assert run.stop_reason == "budget_exhausted:deadline" and "external agent" in run.stop_detail
        assert run.iterations == 0 and not PlanRevision.objects.filter(run=run).exists()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_docs_client_example_runs_as_written(celery_worker, live_server, operator, demo_capabilities):
    from core.tokens import token_create

    planners = (ROOT / "docs" / "planners.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", planners, re.S).group(1)
    _, key = token_create(user=operator, name="docs example")
    env = {**os.environ, "AGENTOPS_URL": live_server.url, "AGENTOPS_TOKEN": key}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("completed completed"), result.stdout
    run = Run.objects.get(owner=operator)
    assert run.planner == "external" and run.status == "completed"
