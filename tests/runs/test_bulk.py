"""Bulk actions by filter (runs.bulk): preview, start, per-run permissions, approvals' hashes, the API.

Inline here (the job is processed by calling bulk_process); test_bulk_worker.py runs it on a real worker.
"""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from core.errors import InvalidInput, NotAllowed
from core.models import AuditEvent
from core.project_access import grant_role
from runs import bulk
from runs.models import Approval, BulkAction, Run, RunLabel


@pytest.fixture
def lead(roles):
    user = User.objects.create_user("leo", password="pw-leo")
    grant_role(user, "lead operator")
    return user


@pytest.fixture
def mixed(make_run, operator, second_operator):
    """Two live runs of the operator, two of the second operator, one finished run of the operator."""
    return {"mine": [make_run(owner=operator, goal="mine a"), make_run(owner=operator, goal="mine b")],
            "theirs": [make_run(owner=second_operator, goal="theirs a"), make_run(owner=second_operator,
                                                                                  goal="theirs b")],
            "finished": make_run(owner=operator, goal="mine done", status="completed",
                                 planner_config=SCRIPT)}


SCRIPT = {"plans": [[{"id": "s1", "capability": "search_documents", "arguments": {"query": "travel"}}]]}


def _process(job):
    assert bulk.bulk_process(job.pk)
    job.refresh_from_db()
    return job


class TestPreview:
    def test_it_counts_the_runs_the_filter_selects_and_why_some_cannot_be_acted_on(self, mixed, operator):
        preview = bulk.bulk_preview(user=operator, action="cancel", query="status=active")
        assert preview.selected == 4
        assert preview.eligible == 2
        assert dict(preview.refused) == {bulk.NOT_YOURS: 2}

    def test_the_filter_means_what_it_means_on_the_runs_list(self, mixed, operator, client_for):
        preview = bulk.bulk_preview(user=operator, action="label", query="goal=mine&status=running")
        page = client_for(operator).get("/runs/?goal=mine&status=running").content.decode()
        assert preview.selected == 2 == sum(f"#{run.pk}<" in page for run in mixed["mine"])

    @pytest.mark.parametrize("query, field", [("colour=red", "query"), ("status=sideways", "query"),
                                              ("created_from=yesterday", "query")])
    def test_a_bad_filter_is_refused_naming_it(self, mixed, operator, query, field):
        with pytest.raises(InvalidInput) as caught:
            bulk.bulk_preview(user=operator, action="cancel", query=query)
        assert field in caught.value.fields

    def test_a_viewer_may_not_even_preview(self, mixed, viewer):
        with pytest.raises(NotAllowed):
            bulk.bulk_preview(user=viewer, action="cancel", query="")


class TestCancel:
    def test_an_operators_bulk_cancel_skips_others_runs(self, mixed, operator):
        job = _process(bulk.bulk_start(user=operator, action="cancel", query="status=active"))
        assert (job.status, job.total, job.done, job.skipped, job.failed) == ("done", 4, 2, 2, 0)
        assert set(Run.objects.filter(status="cancelled").values_list("pk", flat=True)) == {r.pk for r in mixed["mine"]}
        assert {p["run"] for p in job.problems} == {r.pk for r in mixed["theirs"]}
        assert all(p["reason"] == bulk.NOT_YOURS for p in job.problems)
        # An audit row per run acted on, and one for the job.
        assert AuditEvent.objects.filter(action="run.cancelled").count() == 2
        assert AuditEvent.objects.filter(action="bulk_action.started", target_id=str(job.pk)).count() == 1

    def test_a_lead_operator_cancels_everyones(self, mixed, lead):
        job = _process(bulk.bulk_start(user=lead, action="cancel", query="status=active"))
        assert (job.done, job.skipped) == (4, 0)

    def test_over_runs_the_user_may_not_touch_it_is_refused_and_nothing_changes(self, mixed, second_operator):
        before = list(Run.objects.order_by("pk").values_list("status", flat=True))
        with pytest.raises(NotAllowed) as caught:
            bulk.bulk_start(user=second_operator, action="cancel", query="goal=mine")
        assert "another user's run" in caught.value.message
        assert BulkAction.objects.count() == 0 and not AuditEvent.objects.filter(action__startswith="bulk").exists()
        assert list(Run.objects.order_by("pk").values_list("status", flat=True)) == before

    def test_a_viewer_is_refused_and_nothing_changes(self, mixed, viewer):
        with pytest.raises(NotAllowed):
            bulk.bulk_start(user=viewer, action="cancel", query="")
        assert BulkAction.objects.count() == 0

    def test_a_run_that_finished_meanwhile_is_skipped(self, mixed, operator):
        job = bulk.bulk_start(user=operator, action="cancel", query="goal=mine&status=active")
        Run.objects.filter(pk=mixed["mine"][0].pk).update(status="completed", stop_reason="completed")
        job = _process(job)
        assert (job.done, job.skipped) == (1, 1)
        assert job.problems == [{"run": mixed["mine"][0].pk, "outcome": "skipped", "reason": "already finished"}]

    def test_processing_again_acts_on_no_run_twice(self, mixed, operator):
        job = _process(bulk.bulk_start(user=operator, action="fork", query="status=finished"))
        assert job.done == 1, job.problems
        assert bulk.bulk_process(job.pk)   # done: nothing more
        assert Run.objects.filter(forked_from=mixed["finished"]).count() == 1


class TestFork:
    def test_it_resumes_each_finished_run_once(self, mixed, operator, manual_advance):
        job = _process(bulk.bulk_start(user=operator, action="fork", query="goal=mine"))
        assert (job.done, job.skipped) == (1, 2)   # the two live ones are still running
        fork = Run.objects.get(forked_from=mixed["finished"])
        assert fork.owner == operator
        assert {p["reason"] for p in job.problems} == {"still live (cancel it first to re-run it now)"}

    def test_a_duplicate_delivery_after_a_crash_mid_job_skips_the_runs_already_acted_on(self, make_run, operator,
                                                                                          manual_advance):
        runs = [make_run(owner=operator, status="stopped", planner_config=SCRIPT) for _ in range(3)]
        job = bulk.bulk_start(user=operator, action="fork", query="status=finished")
        bulk._process_one(job.pk, runs[0].pk, operator)   # the first task acted on one run, then died
        assert bulk.bulk_process(job.pk)                   # the re-sent task
        assert bulk.bulk_process(job.pk)                   # and a duplicate of it
        assert [Run.objects.filter(forked_from=r).count() for r in runs] == [1, 1, 1]
        job.refresh_from_db()
        assert (job.done, job.cursor) == (3, runs[-1].pk)


class TestLabel:
    def test_it_adds_and_removes_labels_keeping_the_index_in_step(self, make_run, operator):
        run = make_run(owner=operator, labels={"team": "a", "old": "x"})
        RunLabel.objects.bulk_create([RunLabel(run=run, key="team", value="a"), RunLabel(run=run, key="old", value="x")])
        job = _process(bulk.bulk_start(user=operator, action="label", query="label=team=a",
                                       parameters={"add": {"team": "b", "incident": "42"}, "remove": ["old"]}))
        run.refresh_from_db()
        assert job.done == 1 and run.labels == {"team": "b", "incident": "42"}
        assert set(RunLabel.objects.filter(run=run).values_list("key", "value")) == {("team", "b"), ("incident", "42")}
        assert bulk.bulk_preview(user=operator, action="label", query="label=incident=42").selected == 1
        assert AuditEvent.objects.filter(action="run.labels_changed", target_id=str(run.pk)).count() == 1

    @pytest.mark.parametrize("parameters, field", [({"add": {"Bad Key": "x"}}, "parameters.add"),
                                                   ({"add": {}}, "parameters.add"),
                                                   ({"remove": "team"}, "parameters.remove"),
                                                   ({"colour": "red"}, "parameters.colour")])
    def test_a_bad_change_is_refused_naming_it(self, make_run, operator, parameters, field):
        make_run(owner=operator)
        with pytest.raises(InvalidInput) as caught:
            bulk.bulk_start(user=operator, action="label", query="", parameters=parameters)
        assert field in caught.value.fields
        assert BulkAction.objects.count() == 0


@pytest.fixture
def awaiting(make_run, make_revision, make_step, make_approval, second_operator):
    """Three runs of the second operator, each awaiting approval of one step."""
    made = []
    for n in range(3):
        run = make_run(owner=second_operator, status="awaiting_approval", goal=f"awaiting {n}")
        revision = make_revision(run)
        step = make_step(revision, arguments={"n": n}, arguments_hash=f"hash{n}")
        made.append(make_approval(run, revision=revision, step=step))
    return made


class TestDecide:
    def test_it_decides_only_requests_whose_hash_is_unchanged_since_the_preview(self, awaiting, operator):
        preview = bulk.bulk_preview(user=operator, action="approve", query="status=awaiting_approval")
        assert (preview.selected, preview.eligible) == (3, 3)
        assert preview.approvals == {str(a.pk): a.arguments_hash for a in awaiting}
        # The second request changed after the person looked: the job must not approve it.
        Approval.objects.filter(pk=awaiting[1].pk).update(arguments_hash="changed")
        job = _process(bulk.bulk_start(user=operator, action="approve", query="status=awaiting_approval",
                                       parameters={"comment": "incident 42"}, expected_hashes=preview.approvals))
        assert (job.done, job.skipped) == (2, 1)
        states = dict(Approval.objects.values_list("pk", "state"))
        assert [states[a.pk] for a in awaiting] == ["approved", "pending", "approved"]
        assert "changed since you opened it" in job.problems[0]["reason"]
        assert AuditEvent.objects.filter(action="step.approved").count() == 2

    def test_a_request_asked_after_the_preview_is_not_decided(self, awaiting, operator):
        expected = {str(awaiting[0].pk): awaiting[0].arguments_hash}
        job = _process(bulk.bulk_start(user=operator, action="reject", query="status=awaiting_approval",
                                       expected_hashes=expected))
        assert (job.done, job.skipped) == (1, 2)
        assert list(Approval.objects.filter(state="rejected").values_list("pk", flat=True)) == [awaiting[0].pk]

    def test_four_eyes_refuses_the_owner_per_run(self, awaiting, make_run, make_revision, make_step, make_approval,
                                                 operator, second_operator, settings):
        settings.AGENTOPS_FOUR_EYES = True
        own = make_run(owner=operator, status="awaiting_approval")
        revision = make_revision(own)
        mine = make_approval(own, revision=revision, step=make_step(revision, arguments_hash="h"))
        preview = bulk.bulk_preview(user=operator, action="approve", query="status=awaiting_approval")
        assert (preview.selected, preview.eligible) == (4, 3)
        assert str(mine.pk) not in preview.approvals
        job = _process(bulk.bulk_start(user=operator, action="approve", query="status=awaiting_approval",
                                       expected_hashes={**preview.approvals, str(mine.pk): "h"}))
        assert (job.done, job.skipped) == (3, 1)
        assert job.problems[0]["run"] == own.pk and job.problems[0]["reason"].startswith("four-eyes rule")
        assert Approval.objects.get(pk=mine.pk).state == "pending"
        with pytest.raises(NotAllowed):   # the owner alone on their own run: refused, nothing made
            bulk.bulk_start(user=operator, action="approve", query=f"goal={own.goal}&status=awaiting_approval",
                            expected_hashes={str(mine.pk): "h"})

    def test_deciding_needs_the_hashes_seen(self, awaiting, operator):
        with pytest.raises(InvalidInput) as caught:
            bulk.bulk_start(user=operator, action="approve", query="status=awaiting_approval")
        assert "expected_hashes" in caught.value.fields


class TestSweep:
    def test_a_job_without_progress_is_queued_again_and_one_with_progress_is_not(self, mixed, operator,
                                                                                 django_capture_on_commit_callbacks,
                                                                                 monkeypatch):
        sent = []
        monkeypatch.setattr(bulk, "_send", lambda job_id, countdown=None: sent.append(job_id))
        job = bulk.bulk_start(user=operator, action="cancel", query="status=active")
        now = timezone.now()
        assert bulk.requeue_stalled_bulk_actions(now=now) == 0
        later = now + timedelta(seconds=bulk.stall_after_s() + 1)
        assert bulk.requeue_stalled_bulk_actions(now=later) == 1 and sent == [job.pk]
        assert bulk.requeue_stalled_bulk_actions(now=later) == 0   # touched: waits again
        _process(job)
        assert bulk.requeue_stalled_bulk_actions(now=later + timedelta(days=1)) == 0


class TestApi:
    def test_preview_start_and_progress(self, mixed, operator, api_for, django_capture_on_commit_callbacks,
                                        monkeypatch):
        monkeypatch.setattr(bulk, "_send", lambda job_id, countdown=None: None)
        api = api_for(operator)
        preview = api.post("/api/runs/bulk/preview/", {"action": "cancel", "query": "status=active"}, format="json")
        assert preview.status_code == 200, preview.content
        assert preview.json()["selected"] == 4 and preview.json()["eligible"] == 2
        assert preview.json()["refused"] == [{"reason": bulk.NOT_YOURS, "runs": 2}]
        started = api.post("/api/runs/bulk/", {"action": "cancel", "query": "status=active"}, format="json")
        assert started.status_code == 201, started.content
        job_id = started.json()["id"]
        bulk.bulk_process(job_id)
        got = api.get(f"/api/runs/bulk/{job_id}/").json()
        assert (got["status"], got["total"], got["done"], got["skipped"]) == ("done", 4, 2, 2)
        assert len(got["problems"]) == 2

    @pytest.mark.parametrize("body, field", [
        ({"action": "explode", "query": ""}, "action"),
        ({"action": "cancel", "query": "colour=red"}, "query"),
        ({"action": "cancel", "query": "", "colour": "red"}, "colour"),
        ({"action": "label", "query": "", "parameters": {"add": {"A B": "x"}}}, "parameters.add"),
        ({"action": "cancel", "query": "", "parameters": []}, "parameters"),
    ])
    def test_bad_input_is_a_400_naming_the_field_and_changes_nothing(self, mixed, operator, api_for, body, field):
        for url in ("/api/runs/bulk/preview/", "/api/runs/bulk/"):
            answer = api_for(operator).post(url, body, format="json")
            if url.endswith("preview/") and field.startswith("parameters"):
                continue   # a preview takes no parameters: checked at the start
            assert answer.status_code == 400, (url, answer.content)
            assert field in answer.json()["error"]["fields"], answer.json()
        assert BulkAction.objects.count() == 0

    def test_over_runs_the_user_may_not_touch_it_is_a_403_and_nothing_changes(self, mixed, second_operator, api_for,
                                                                             viewer):
        answer = api_for(second_operator).post("/api/runs/bulk/", {"action": "cancel", "query": "goal=mine"},
                                               format="json")
        assert answer.status_code == 403 and "another user's run" in answer.json()["error"]["message"]
        assert api_for(viewer).post("/api/runs/bulk/preview/", {"action": "cancel", "query": ""},
                                    format="json").status_code == 403
        assert BulkAction.objects.count() == 0
        assert not Run.objects.filter(status="cancelled").exists()

    def test_a_job_is_shown_only_to_whoever_started_it_or_a_lead(self, mixed, operator, second_operator, lead, api_for,
                                                                 monkeypatch):
        monkeypatch.setattr(bulk, "_send", lambda job_id, countdown=None: None)
        job = bulk.bulk_start(user=operator, action="cancel", query="goal=mine")
        assert api_for(second_operator).get(f"/api/runs/bulk/{job.pk}/").status_code == 404
        assert api_for(lead).get(f"/api/runs/bulk/{job.pk}/").status_code == 200
        assert api_for(operator).get(f"/api/runs/bulk/{job.pk}/?colour=red").status_code == 400


class TestPages:
    def test_from_the_list_through_the_preview_to_the_job(self, mixed, operator, client_for, monkeypatch,
                                                         django_capture_on_commit_callbacks):
        monkeypatch.setattr(bulk, "_send", lambda job_id, countdown=None: None)
        client = client_for(operator)
        listing = client.get("/runs/?status=active").content.decode()
        assert "/runs/bulk/?query=status%3Dactive%26evaluation_runs%3Dhide" in listing
        page = client.get("/runs/bulk/", {"query": "status=active&evaluation_runs=hide", "action": "cancel"})
        text = page.content.decode()
        assert page.status_code == 200 and 'data-testid="bulk-selected">4<' in text and "Confirm: cancel 2 runs" in text
        started = client.post("/runs/bulk/start/", {"query": "status=active", "action": "cancel"})
        job = BulkAction.objects.get()
        assert started.status_code == 302 and started["Location"] == f"/runs/bulk/{job.pk}/"
        bulk.bulk_process(job.pk)
        done = client.get(f"/runs/bulk/{job.pk}/", HTTP_HX_REQUEST="true")
        assert done.status_code == 286 and 'data-status="done"' in done.content.decode()

    def test_over_runs_the_user_may_not_touch_the_page_refuses_and_nothing_changes(self, mixed, second_operator,
                                                                                    client_for):
        answer = client_for(second_operator).post("/runs/bulk/start/", {"query": "goal=mine", "action": "cancel"})
        assert answer.status_code == 403 and "another user" in answer.content.decode()
        assert BulkAction.objects.count() == 0

    def test_a_bad_filter_is_a_400_on_the_page(self, mixed, operator, client_for):
        answer = client_for(operator).get("/runs/bulk/", {"query": "colour=red", "action": "cancel"})
        assert answer.status_code == 400 and "Unknown filter" in answer.content.decode()
