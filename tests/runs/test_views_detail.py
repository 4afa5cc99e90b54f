"""The run trace: header, budgets, revisions, attempts, live updates, cancel, JSON download."""
from __future__ import annotations

import json

import pytest

from core.choices import STOP_REASON_VALUES
from runs.models import Run


class TestRunDetail:
    def url(self, run):
        return f"/runs/{run.pk}/"

    def test_it_redirects_anonymous_users_to_login(self, client, traced_run):
        response = client.get(self.url(traced_run))
        assert response.status_code == 302 and response["Location"].startswith("/login/")

    def test_it_refuses_users_without_view_permission(self, client_for, nobody, traced_run):
        assert client_for(nobody).get(self.url(traced_run)).status_code == 403

    def test_it_returns_404_for_an_unknown_run(self, client_for, viewer):
        assert client_for(viewer).get("/runs/999999/").status_code == 404

    def test_it_explains_the_stop_reason_in_plain_words(self, client_for, viewer, make_run):
        run = make_run(status="stopped", stop_reason="budget_exhausted:deadline", stop_detail="60 s passed.",
                       budgets={"max_tool_calls": 20, "deadline_s": 60})
        body = client_for(viewer).get(self.url(run)).content.decode()
        assert "Stopped: the run&#x27;s deadline passed" in body
        assert "60 s passed." in body

    def test_it_marks_the_budget_that_stopped_the_run(self, client_for, viewer, make_run):
        run = make_run(status="stopped", stop_reason="budget_exhausted:tool_calls", tool_calls=20,
                       budgets={"max_tool_calls": 20, "max_tokens": 1000})
        body = client_for(viewer).get(self.url(run)).content.decode()
        exhausted = body[body.index('gauge card exhausted'):]
        assert exhausted.index("Tool calls") < exhausted.index("Exhausted: this budget stopped the run.")
        assert body.count("Exhausted: this budget stopped the run.") == 1

    def test_it_shows_revisions_with_reason_diff_and_trigger(self, client_for, viewer, traced_run):
        body = client_for(viewer).get(self.url(traced_run)).content.decode()
        assert "Revision 2" in body and "result_not_found" in body
        assert "Nothing found; search again." in body
        trigger = traced_run.plan_revisions.get(number=2)
        assert "<strong>added</strong> s2 (create_ticket)" in body  # computed from consecutive steps
        assert "<strong>changed</strong> s1: arguments" in body
        assert trigger.number == 2

    def test_it_renders_recorded_changes_and_validation_errors(self, client_for, viewer, make_run, make_revision):
        run = make_run(status="stopped", stop_reason="plan_rejected")
        make_revision(run, number=1, accepted=False,
                      validation_errors=[{"code": "unknown_capability", "message": "No such capability: fly",
                                          "step_id": "s1"}])
        make_revision(run, number=2, accepted=False, reason_code="plan_rejected",
                      changes={"added": ["s3 (notify)"], "removed": [], "changed": ["s1: arguments"],
                               "summary": "added s3"})
        body = client_for(viewer).get(self.url(run)).content.decode()
        assert "No such capability: fly" in body and "unknown_capability" in body
        assert "<strong>added</strong> s3 (notify)" in body
        assert body.count(">rejected<") >= 2

    def test_it_highlights_repeated_attempts_and_the_stop_trigger(self, client_for, viewer, traced_run):
        body = client_for(viewer).get(self.url(traced_run)).content.decode()
        stop = traced_run.stop_attempt
        row = body[body.index(f'id="attempt-{stop.uid}"'):]
        row = row[:row.index("</tr>")]
        assert "repeated" in row and "stop-trigger" in row
        assert ">repeated</span>" in row and ">stop trigger</span>" in row
        first = traced_run.attempts.get(number=1, step__revision__number=1)
        # Only the repeat is flagged, and it links to the attempt it repeats, by its unique label.
        assert f'href="?attempt={first.uid}#attempt-{first.uid}">r1·s1#1</a>' in row
        assert ">r2·s1#1</a>" in row
        first_row = body[body.index(f'id="attempt-{first.uid}"'):]
        assert 'class="attempt-row" data-status="retryable"' in first_row[:200]
        ok = traced_run.attempts.get(number=2)
        ok_row = body[body.index(f'id="attempt-{ok.uid}"'):]
        assert 'class="attempt-row"' in ok_row[:200]

    def test_it_links_attempts_for_expansion_with_and_without_htmx(self, client_for, viewer, traced_run):
        body = client_for(viewer).get(self.url(traced_run)).content.decode()
        attempt = traced_run.stop_attempt
        link = f"/runs/{traced_run.pk}/attempts/{attempt.uid}/"
        assert f'href="{link}" hx-get="{link}" hx-target="#attempt-detail-{attempt.uid}"' in body

    def test_it_polls_while_the_run_is_active(self, client_for, viewer, make_run):
        run = make_run(status="running")
        body = client_for(viewer).get(self.url(run)).content.decode()
        assert 'hx-trigger="every 2s"' in body
        response = client_for(viewer).get(self.url(run), headers={"HX-Request": "true"})
        assert response.status_code == 200
        assert response.content.decode().lstrip().startswith('<div id="trace"')

    def test_it_stops_polling_once_the_run_has_finished(self, client_for, viewer, traced_run):
        response = client_for(viewer).get(self.url(traced_run), headers={"HX-Request": "true"})
        assert response.status_code == 286
        assert b'hx-trigger="every 2s"' not in response.content
        assert b"Revision 2" in response.content

    def test_it_pages_through_many_attempts(self, client_for, viewer, make_run, make_revision, make_step,
                                            make_attempt):
        run = make_run()
        step = make_step(make_revision(run), status="running")
        attempts = [make_attempt(step, number=n, kind="poll", decision="poll") for n in range(1, 131)]
        client = client_for(viewer)
        body = client.get(self.url(run)).content.decode()
        assert "Attempts page 1 of 2" in body
        assert f'id="attempt-{attempts[0].uid}"' in body and f'id="attempt-{attempts[120].uid}"' not in body
        body = client.get(self.url(run), {"attempts_page": 2}).content.decode()
        assert f'id="attempt-{attempts[120].uid}"' in body and f'id="attempt-{attempts[0].uid}"' not in body
        # A deep link to an attempt opens the page that holds it.
        body = client.get(self.url(run), {"attempt": attempts[125].uid}).content.decode()
        assert f'id="attempt-{attempts[125].uid}"' in body

    def test_it_lists_the_runs_approvals(self, client_for, viewer, make_run, make_revision, make_step,
                                         make_approval):
        run = make_run(status="awaiting_approval")
        rev = make_revision(run)
        make_approval(run, revision=rev, step=make_step(rev, capability="create_ticket"))
        body = client_for(viewer).get(self.url(run)).content.decode()
        assert "Approvals" in body and "create_ticket" in body and "open inbox" in body

    def test_it_shows_what_the_planner_answered_and_saw(self, client_for, viewer, make_run, make_revision):
        run = make_run()
        make_revision(run, tokens=812, cost=0.0042, capabilities_seen=["search_documents", "get_document"],
                      planner_output='{"steps": [{"capability": "search_documents"}], "note": "<b>bold</b>"}')
        body = client_for(viewer).get(self.url(run)).content.decode()
        assert "812 tokens" in body
        assert "<code>search_documents</code>, <code>get_document</code>" in body
        assert "&lt;b&gt;bold&lt;/b&gt;" in body and "<b>bold</b>" not in body

    def test_it_escapes_goal_and_stop_detail(self, client_for, viewer, make_run):
        run = make_run(goal="<script>alert('goal')</script>", status="stopped", stop_reason="internal_error",
                       stop_detail="<img src=x onerror=alert(1)>")
        body = client_for(viewer).get(self.url(run)).content.decode()
        assert "<script>alert(" not in body and "<img src=x" not in body
        assert "&lt;script&gt;" in body and "&lt;img src=x" in body

    def test_it_shows_cancel_only_to_operators_while_the_run_is_active(self, client_for, viewer, operator,
                                                                       make_run):
        run = make_run(status="running")
        assert b"Cancel run" not in client_for(viewer).get(self.url(run)).content
        assert b"Cancel run" in client_for(operator).get(self.url(run)).content
        done = make_run(status="completed")
        assert b"Cancel run" not in client_for(operator).get(self.url(done)).content

    @pytest.mark.parametrize("attempt_count", [1, 150])
    def test_it_issues_a_bounded_number_of_queries(self, client_for, viewer, make_run, make_revision, make_step,
                                                   make_attempt, make_approval, attempt_count,
                                                   django_assert_max_num_queries):
        run = make_run(status="stopped", stop_reason="stalled",
                       budgets={"max_tool_calls": 500, "max_calls_per_capability": {"search_documents": 400}})
        rev = make_revision(run)
        step = make_step(rev)
        for n in range(1, attempt_count + 1):
            make_attempt(step, number=n, signature_hash="same" if n % 2 else None)
        make_revision(run, number=2, reason_code="new_information")
        make_approval(run, revision=rev, step=step, state="expired", decided_at=run.finished_at)
        client = client_for(viewer)
        with django_assert_max_num_queries(18):   # 16, the runs forked from this one, the user's projects
            response = client.get(self.url(run))
        assert response.status_code == 200


class TestAttemptDetail:
    def test_it_shows_the_full_observation_and_decision(self, client_for, viewer, traced_run):
        attempt = traced_run.stop_attempt
        response = client_for(viewer).get(f"/runs/{traced_run.pk}/attempts/{attempt.uid}/")
        body = response.content.decode()
        assert response.status_code == 200
        assert "<html" in body  # a whole page without JavaScript
        for text in ("timeout", "transient", attempt.span_id, attempt.decision.get_decision_display(),
                     "stop trigger", "repeated",
                     "Repeated without progress", "travel"):
            assert text in body

    def test_it_returns_only_the_partial_to_htmx(self, client_for, viewer, traced_run):
        attempt = traced_run.attempts.get(number=2)
        response = client_for(viewer).get(f"/runs/{traced_run.pk}/attempts/{attempt.uid}/",
                                          headers={"HX-Request": "true"})
        body = response.content.decode()
        assert "<html" not in body and body.lstrip().startswith("<section")
        assert "&quot;documents&quot;: []" in body

    def test_it_escapes_tool_output(self, client_for, viewer, make_run, make_revision, make_step, make_attempt):
        run = make_run()
        attempt = make_attempt(make_step(make_revision(run)), output={"html": "<script>alert('out')</script>"},
                               error_message="")
        body = client_for(viewer).get(f"/runs/{run.pk}/attempts/{attempt.uid}/").content.decode()
        assert "<script>alert('out')" not in body
        assert "&lt;script&gt;alert(&#x27;out&#x27;)&lt;/script&gt;" in body

    def test_it_links_a_large_output_and_serves_it_as_json(self, client_for, viewer, nobody, make_run,
                                                            make_revision, make_step, make_attempt):
        from capabilities.models import StoredOutput

        content = json.dumps({"rows": list(range(100))})
        stored = StoredOutput.objects.create(sha256="f" * 64, size_bytes=len(content), content=content)
        run = make_run()
        attempt = make_attempt(make_step(make_revision(run)), output=None, output_ref=stored)
        body = client_for(viewer).get(f"/runs/{run.pk}/attempts/{attempt.uid}/").content.decode()
        output_url = f"/runs/{run.pk}/attempts/{attempt.uid}/output.json"
        assert f'href="{output_url}"' in body
        response = client_for(viewer).get(output_url)
        assert response.status_code == 200 and response["Content-Type"].startswith("application/json")
        assert json.loads(response.content) == {"rows": list(range(100))}
        assert client_for(nobody).get(output_url).status_code == 403

    def test_it_returns_404_for_an_attempt_of_another_run(self, client_for, viewer, traced_run, make_run):
        other = make_run()
        assert client_for(viewer).get(f"/runs/{other.pk}/attempts/{traced_run.stop_attempt.uid}/").status_code == 404


class TestTraceJson:
    def test_it_downloads_the_whole_trace(self, client_for, viewer, traced_run, make_approval):
        rev = traced_run.plan_revisions.get(number=2)
        make_approval(traced_run, revision=rev, step=rev.plan_steps.first(), state="expired",
                      decided_at=traced_run.finished_at)
        response = client_for(viewer).get(f"/runs/{traced_run.pk}/trace.json")
        assert response.status_code == 200
        assert response["Content-Disposition"] == f'attachment; filename="run-{traced_run.pk}-trace.json"'
        trace = json.loads(b"".join(response.streaming_content))
        assert trace["run"]["stop_reason"] == "stalled"
        assert trace["run"]["stop_attempt"] == traced_run.stop_attempt.uid
        assert [r["number"] for r in trace["revisions"]] == [1, 2]
        assert len(trace["steps"]) == 2 and len(trace["attempts"]) == 3
        last = trace["attempts"][-1]
        assert last["observation"]["error_code"] == "timeout"
        assert last["decision"]["decision"] == "stop_stalled"
        assert last["repeated_without_progress"] is True
        assert [a["label"] for a in trace["attempts"]] == ["r1·s1#1", "r1·s1#2", "r2·s1#1"]
        assert trace["approvals"][0]["state"] == "expired"

    def test_it_streams_thousands_of_attempts(self, client_for, viewer, make_run, make_revision, make_step):
        from django.utils import timezone

        from runs.models import Attempt

        run = make_run()
        step = make_step(make_revision(run))
        now = timezone.now()
        Attempt.objects.bulk_create([
            Attempt(run=run, step=step, uid=f"bulk{n:06d}", number=n, capability_name="search_documents",
                    signature="s", signature_hash="h", started_at=now, ended_at=now, latency_s=0.1, status="ok",
                    trace_id=run.trace_id, span_id=f"{n:016d}") for n in range(1, 1201)])
        response = client_for(viewer).get(f"/runs/{run.pk}/trace.json")
        chunks = list(response.streaming_content)
        assert len(chunks) > 6  # written piece by piece, not as one string
        assert len(json.loads(b"".join(chunks))["attempts"]) == 1200

    def test_it_refuses_users_without_view_permission(self, client_for, nobody, traced_run):
        assert client_for(nobody).get(f"/runs/{traced_run.pk}/trace.json").status_code == 403


class TestRunCancel:
    def test_it_cancels_a_run_for_an_operator(self, client_for, operator, make_run):
        run = make_run(status="queued")
        response = client_for(operator).post(f"/runs/{run.pk}/cancel/")
        assert response.status_code == 302 and response["Location"] == f"/runs/{run.pk}/"
        run.refresh_from_db()
        assert run.status == "cancelled" and run.stop_reason == "cancelled"
        page = client_for(operator).get(f"/runs/{run.pk}/").content.decode()
        assert f"Run {run.pk} was cancelled." in page

    def test_it_refuses_a_forged_post_from_a_viewer(self, client_for, viewer, make_run):
        run = make_run(status="queued")
        response = client_for(viewer).post(f"/runs/{run.pk}/cancel/")
        assert response.status_code == 403
        assert b"You do not have permission to cancel runs." in response.content
        run.refresh_from_db()
        assert run.status == "queued"

    def test_it_says_when_the_run_has_already_finished(self, client_for, operator, make_run):
        run = make_run(status="completed")
        response = client_for(operator).post(f"/runs/{run.pk}/cancel/", follow=True)
        assert b"has already finished" in response.content

    def test_it_only_accepts_post(self, client_for, operator, make_run):
        run = make_run(status="queued")
        assert client_for(operator).get(f"/runs/{run.pk}/cancel/").status_code == 405
        assert Run.objects.get(pk=run.pk).status == "queued"

    def test_it_requires_a_csrf_token(self, operator, make_run):
        from django.test import Client

        client = Client(enforce_csrf_checks=True)
        client.force_login(operator)
        run = make_run(status="queued")
        assert client.post(f"/runs/{run.pk}/cancel/").status_code == 403
        assert Run.objects.get(pk=run.pk).status == "queued"


class TestStopReasonWords:
    def test_it_has_plain_words_for_every_stop_reason(self):
        from runs.templatetags.runs_tags import STOP_REASON_TEXT, stop_reason_text
        from runtime.stop import StopReason

        for value in STOP_REASON_VALUES:
            assert STOP_REASON_TEXT[StopReason.parse(value)] == stop_reason_text(value)
            assert value not in stop_reason_text(value)  # words, not the code
        assert stop_reason_text("budget_exhausted:deadline") == "Stopped: the run's deadline passed"
