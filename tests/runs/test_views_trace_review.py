"""The trace page as an incident reviewer reads it: attribution, the stop box, filters, the timeline."""
import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from runs.models import Attempt, Run


def url(run):
    return f"/runs/{run.pk}/"


def row_of(body, attempt):
    row = body[body.index(f'id="attempt-{attempt.uid}"'):]
    return row[:row.index("</tr>")]


@pytest.mark.django_db
class TestAttribution:
    def test_polls_and_resends_are_labelled_as_what_they_are_not_repeated(
            self, client_for, viewer, make_run, make_revision, make_step, make_attempt, make_capability):
        idempotent = make_capability("create_ticket", side_effect="write", idempotent=True)
        plain = make_capability("send_notification", side_effect="external", idempotent=False)
        run = make_run(status="running")
        rev = make_revision(run)
        poll_step = make_step(rev, index=0, capability="get_ticket_status")
        polls = [make_attempt(poll_step, number=n, kind="call" if n == 1 else "poll", signature_hash="same",
                              decision="poll") for n in (1, 2, 3)]
        resend_step = make_step(rev, index=1, capability="create_ticket", version=idempotent)
        make_attempt(resend_step, number=1, status="retryable", error_code="timeout", signature_hash="t")
        resend = make_attempt(resend_step, number=2, kind="resolve", signature_hash="t", capability_version=idempotent)
        lookup_step = make_step(rev, index=2, capability="send_notification", version=plain)
        lookup = make_attempt(lookup_step, number=1, kind="lookup", signature_hash="n", capability_version=plain)
        body = client_for(viewer).get(url(run)).content.decode()
        assert "<td>poll</td>" in row_of(body, polls[1])
        assert "<td>idempotent re-send</td>" in row_of(body, resend)
        assert "<td>status lookup</td>" in row_of(body, lookup)
        assert "attempt-row repeated" not in body
        assert ">r1·s1#3</a>" in row_of(body, polls[2]) and ">r1·s2#2</a>" in row_of(body, resend)

    def test_the_completing_attempt_is_not_a_red_stop_trigger(
            self, client_for, viewer, make_run, make_revision, make_step, make_attempt):
        run = make_run(status="completed")
        done = make_attempt(make_step(make_revision(run)), decision="complete")
        Run.objects.filter(pk=run.pk).update(stop_attempt=done)
        body = client_for(viewer).get(url(run)).content.decode()
        row = row_of(body, done)
        assert "stop-trigger" not in row and "completion" in row and "completed the run" in row
        assert "Completed by" in body

    def test_a_rejection_is_triggered_by_the_rejected_steps_decision(
            self, client_for, viewer, second_operator, make_run, make_revision, make_step, make_attempt,
            make_approval):
        run = make_run(status="stopped", stop_reason="approval_rejected", stop_detail="Duplicate")
        rev = make_revision(run)
        earlier = make_attempt(make_step(rev, index=0, status="succeeded"), decision="continue")
        rejected_step = make_step(rev, index=1, key="s2", capability="create_ticket", status="skipped")
        approval = make_approval(run, revision=rev, step=rejected_step, state="rejected", decided_by=second_operator,
                                 decided_at=timezone.now(), comment="Duplicate")
        Run.objects.filter(pk=run.pk).update(stop_attempt=earlier)  # what the runtime records
        body = client_for(viewer).get(url(run)).content.decode()
        assert "stop-trigger" not in row_of(body, earlier)
        assert f'href="#approval-{approval.pk}">olga rejected the approval of step s2 (create_ticket)</a>' in body
        assert f'<tr id="approval-{approval.pk}" class="stop-trigger">' in body

    def test_the_stop_box_states_the_stall_kind_and_the_last_failure(self, client_for, viewer, traced_run):
        Run.objects.filter(pk=traced_run.pk).update(
            stop_detail='step s1: search_documents {"q":"travel"} repeated with the same outcome (retryable timeout)')
        body = client_for(viewer).get(url(traced_run)).content.decode()
        box = body[body.index('id="stop-box"'):body.index('aria-labelledby="budgets-heading"')]
        assert 'data-testid="stall-kind">repeated_without_progress</code>' in box
        stop = traced_run.stop_attempt
        assert f'href="?attempt={stop.uid}#attempt-{stop.uid}">r2·s1#1 search_documents</a>' in box
        assert "Last failing observation" in box and "<code>timeout</code>" in box

    def test_it_reads_the_runs_own_stall_kind_when_it_has_one(self, client_for, viewer, traced_run):
        Run.objects.filter(pk=traced_run.pk).update(stall_kind="planner_exhausted")
        body = client_for(viewer).get(url(traced_run)).content.decode()
        assert 'data-testid="stall-kind">planner_exhausted</code>: the planner had nothing more to try' in body

    def test_steps_a_stopped_run_never_reached_are_not_pending(
            self, client_for, viewer, make_run, make_revision, make_step):
        run = make_run(status="stopped", stop_reason="cancelled")
        make_step(make_revision(run), status="pending")
        body = client_for(viewer).get(url(run)).content.decode()
        assert "not reached" in body and ">Pending<" not in body
        assert "This run made no attempts." in body and "No attempts yet" not in body


@pytest.mark.django_db
class TestTraceFilters:
    def test_it_filters_by_capability_status_error_and_repeated(self, client_for, viewer, traced_run):
        client = client_for(viewer)
        body = client.get(url(traced_run), {"status": "retryable"}).content.decode()
        assert body.count('class="attempt-row') == 2
        body = client.get(url(traced_run), {"repeated": "on"}).content.decode()
        assert body.count('class="attempt-row') == 1 and "match the filter" in body
        body = client.get(url(traced_run), {"error_code": "timeout", "capability": "search_documents"}).content.decode()
        assert body.count('class="attempt-row') == 2

    def test_an_unknown_filter_value_is_a_400_with_the_whole_trace(self, client_for, viewer, traced_run):
        response = client_for(viewer).get(url(traced_run), {"status": "exploded"})
        assert response.status_code == 400
        assert b"Select a valid choice" in response.content
        assert response.content.count(b'class="attempt-row') == 3

    def test_it_jumps_to_the_first_failure(self, client_for, viewer, traced_run):
        first = traced_run.attempts.exclude(status="ok").order_by("started_at", "id").first()
        body = client_for(viewer).get(url(traced_run)).content.decode()
        assert f'id="jump-first-failure" href="/runs/{traced_run.pk}/?attempt={first.uid}#attempt-{first.uid}"' in body

    def test_it_offers_copy_buttons_and_the_same_settings(self, client_for, operator, traced_run):
        body = client_for(operator).get(url(traced_run)).content.decode()
        assert f'data-copy="{traced_run.trace_id}"' in body and f'data-copy="{traced_run.pk}"' in body
        assert f'href="/runs/start/?from_run={traced_run.pk}"' in body
        attempt = traced_run.stop_attempt
        detail = client_for(operator).get(f"/runs/{traced_run.pk}/attempts/{attempt.uid}/").content.decode()
        assert f'data-copy="{attempt.span_id}"' in detail

    def test_usage_reads_in_words_and_units(self, client_for, viewer, traced_run):
        from runs.models import Decision

        attempt = traced_run.stop_attempt
        Decision.objects.filter(attempt=attempt).update(usage={"tool_calls": 3, "elapsed_s": 0.011456966400146484,
                                                               "started_at": 1764600000.5})
        body = client_for(viewer).get(f"/runs/{traced_run.pk}/attempts/{attempt.uid}/").content.decode()
        assert "<dt>Tool calls</dt><dd>3</dd>" in body and "<dt>Elapsed</dt><dd>11 ms</dd>" in body
        assert "2025-12-01T14:40:00Z" in body and "0.011456966400146484" not in body.split("Raw JSON")[0]

    def test_the_page_is_live_by_morphing_and_has_no_inline_script(self, client_for, viewer, make_run):
        body = client_for(viewer).get(url(make_run(status="running"))).content.decode()
        assert 'hx-swap="morph:outerHTML"' in body and "/static/vendor/idiomorph/idiomorph-ext.min.js" in body
        assert "<script>" not in body and " onsubmit=" not in body and "hx-on" not in body


@pytest.mark.django_db
class TestTimeline:
    def test_it_draws_the_repeated_pair_and_the_stop(self, client_for, viewer, traced_run):
        start = timezone.now() - timedelta(minutes=1)
        for i, attempt in enumerate(traced_run.attempts.order_by("id")):
            Attempt.objects.filter(pk=attempt.pk).update(started_at=start + timedelta(seconds=10 * i),
                                                         ended_at=start + timedelta(seconds=10 * i + 2))
        body = client_for(viewer).get(url(traced_run)).content.decode()
        svg = body[body.index('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 1000'):]
        svg = svg[:svg.index("</svg>")]
        assert "repeats r1·s1#1 without progress; stopped the run" in svg
        assert 'class="repeat-link"' in svg and 'class="stop-line"' in svg
        assert f'href="?attempt={traced_run.stop_attempt.uid}#attempt-{traced_run.stop_attempt.uid}"' in svg
        assert "Planner" in svg and "planner: revision 2 (result_not_found)" in svg

    def test_a_run_recorded_as_ending_before_it_began_is_drawn_within_the_axis(
            self, client_for, viewer, make_run, make_revision, make_step):
        # Clocks that disagree: the planner's bar would be 5 s on a 1 ms axis, millions of pixels wide.
        run = make_run(status="completed", stop_reason="completed")
        make_step(make_revision(run))
        Run.objects.filter(pk=run.pk).update(finished_at=run.created_at - timedelta(seconds=12))
        body = client_for(viewer).get(url(run)).content.decode()
        svg = body[body.index('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 1000'):]
        svg = svg[:svg.index("</svg>")]
        widths = [float(w) for w in re.findall(r'<rect x="[\d.]+" y="[\d.]+" width="([\d.]+)"', svg)]
        assert widths and max(widths) <= 1000

    def test_a_5000_attempt_run_costs_the_same_queries_and_stays_small(
            self, client_for, viewer, make_run, make_revision, make_step):
        def run_with(n):
            run = make_run(status="stopped", stop_reason="budget_exhausted:tool_calls",
                           budgets={"max_tool_calls": 5000})
            step = make_step(make_revision(run))
            start = timezone.now() - timedelta(minutes=10)
            Attempt.objects.bulk_create([Attempt(
                run=run, step=step, uid=f"r{run.pk}a{i}", number=i + 1, kind="call" if i == 0 else "retry",
                capability_name="search_documents", signature="s", signature_hash="h",
                started_at=start + timedelta(milliseconds=100 * i), ended_at=start + timedelta(milliseconds=100 * i + 50),
                latency_s=0.05, status="ok" if i % 3 else "retryable", error_code="" if i % 3 else "timeout",
                repeated_without_progress=i % 50 == 2, trace_id=run.trace_id, span_id=f"s{i}") for i in range(n)])
            return run

        client = client_for(viewer)
        counts, sizes = [], []
        for n in (3, 5000):
            run = run_with(n)
            with CaptureQueriesContext(connection) as queries:
                response = client.get(url(run))
            assert response.status_code == 200
            counts.append(len(queries))
            body = response.content.decode()
            svg = body[body.index('viewBox="0 0 1000'):]
            sizes.append(len(svg[:svg.index("</svg>")]))
        assert counts[0] == counts[1]
        assert sizes[1] < 400_000  # bars merge per pixel: bounded by the width, not the attempts
        assert "items here" in body  # the merged columns say what they hold


@pytest.mark.django_db
def test_an_evaluation_run_links_to_its_twin_in_the_other_mode(client_for, viewer, make_run):
    from evaluation.models import Evaluation, EvaluationResult, EvaluationSuite

    suite = EvaluationSuite.objects.create(name="s", tasks=[])
    evaluation = Evaluation.objects.create(suite=suite, started_by=viewer)
    direct = make_run(status="stopped", evaluation=evaluation, planner="direct")
    planning = make_run(status="completed", evaluation=evaluation)
    for mode, run, ok in (("direct", direct, False), ("planning", planning, True)):
        EvaluationResult.objects.create(evaluation=evaluation, task="lookup", mode=mode, run=run,
                                        verified_success=ok, status=run.status)
    body = client_for(viewer).get(url(direct)).content.decode()
    assert f'href="/evaluations/{evaluation.pk}/"' in body
    # The twins come from the evaluation app, loaded into the page by htmx.
    assert f'hx-get="/evaluations/runs/{direct.pk}/twins/"' in body
    twins = client_for(viewer).get(f"/evaluations/runs/{direct.pk}/twins/").content.decode()
    assert f'<a href="/runs/{planning.pk}/">the planning twin of task lookup (run #{planning.pk}, succeeded)</a>' in twins


@pytest.mark.django_db
def test_the_stop_box_names_the_attempt_a_stopping_repeat_repeats(client_for, viewer, traced_run):
    first = traced_run.attempts.get(number=1, step__revision__number=1)
    body = client_for(viewer).get(url(traced_run)).content.decode()
    assert f'a repeat of <a href="?attempt={first.uid}#attempt-{first.uid}">r1·s1#1</a> without progress' in body


@pytest.mark.django_db
@pytest.mark.parametrize("reason, decision, expected", [
    ("budget_exhausted:deadline", "retry", "the deadline passed (no attempt caused it)"),
    ("budget_exhausted:deadline", "stop_budget", "r1·s1#1 (retryable timeout)"),
    ("cancelled", "continue", "Cancelled by otto."),
    ("terminal_failure:timeout", "stop_terminal_failure", "r1·s1#1 (retryable timeout)"),
])
def test_the_stop_trigger_is_what_actually_stopped_the_run(client_for, viewer, make_run, make_revision, make_step,
                                                           make_attempt, reason, decision, expected):
    run = make_run(status="cancelled" if reason == "cancelled" else "stopped", stop_reason=reason,
                   stop_detail="Cancelled by otto." if reason == "cancelled" else "")
    attempt = make_attempt(make_step(make_revision(run)), status="retryable", error_code="timeout", decision=decision)
    Run.objects.filter(pk=run.pk).update(stop_attempt=attempt)  # the runtime's fallback: the last attempt
    body = client_for(viewer).get(url(run)).content.decode()
    stopped_by = body[body.index('class="stop-trigger-text"'):]
    assert expected in stopped_by[:400]
    is_trigger = "stop-trigger" in row_of(body, attempt)
    assert is_trigger == expected.startswith("r1")


@pytest.mark.django_db
def test_the_timeline_and_json_view_escape_run_data(client_for, viewer, make_run, make_revision, make_step,
                                                    make_attempt):
    run = make_run(status="stopped", stop_reason="stalled")
    step = make_step(make_revision(run), capability='<img src=x onerror="alert(1)">', key="s1")
    attempt = make_attempt(step, status="retryable", error_code="timeout",
                           output={"<b>key</b>": "<script>alert(2)</script>"})
    body = client_for(viewer).get(url(run)).content.decode()
    assert '<img src=x onerror="alert(1)">' not in body and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in body
    detail = client_for(viewer).get(f"/runs/{run.pk}/attempts/{attempt.uid}/").content.decode()
    assert "<script>alert(2)</script>" not in detail and "&lt;script&gt;alert(2)&lt;/script&gt;" in detail
    assert "<b>key</b>" not in detail


@pytest.mark.django_db
def test_a_repeat_links_to_the_earlier_attempt_with_the_same_outcome(client_for, viewer, make_run, make_revision,
                                                                     make_step, make_attempt):
    run = make_run(status="stopped", stop_reason="stalled")
    step = make_step(make_revision(run))
    start = timezone.now() - timedelta(minutes=1)
    same = make_attempt(step, number=1, status="retryable", error_code="timeout", signature_hash="q",
                        started_at=start)
    make_attempt(step, number=2, status="ok", signature_hash="q", started_at=start + timedelta(seconds=5))
    repeat = make_attempt(step, number=3, status="retryable", error_code="timeout", signature_hash="q",
                          repeated_without_progress=True, started_at=start + timedelta(seconds=10))
    body = client_for(viewer).get(url(run)).content.decode()
    assert f'href="?attempt={same.uid}#attempt-{same.uid}">r1·s1#1</a>' in row_of(body, repeat)
    assert "r1·s1#3 repeats r1·s1#1" in body  # the timeline's arc joins the same pair
