"""Comparing two runs: the page's data (runs.trace.compare_page), the page, and the ways to reach it."""
import json

import pytest
from django.test.utils import CaptureQueriesContext


@pytest.fixture
def two_runs(make_run, make_revision, make_step, make_attempt):
    """A: searched, found nothing, replanned and searched again. B: found it at once, then made a ticket."""
    a = make_run(status="completed", goal="Find the travel policy (planning)", tool_calls=3, tokens=1200, cost=0.02,
                 revisions=2, iterations=5)
    a1 = make_revision(a, number=1)
    s = make_step(a1, arguments={"q": "travel"}, arguments_hash="h-travel")
    make_attempt(s, number=1, status="retryable", error_code="timeout", error_message="timed out after 2 s")
    make_attempt(s, number=2, output={"documents": []})
    a2 = make_revision(a, number=2, reason_code="result_not_found", reason="Nothing found: search for the policy.")
    s = make_step(a2, arguments={"q": "travel policy"}, arguments_hash="h-policy")
    make_attempt(s, number=1, output={"documents": [{"id": "POL-7", "title": "Travel"}]})
    b = make_run(status="stopped", stop_reason="terminal_failure:permission_denied", goal="Find the travel policy",
                 planner="direct", tool_calls=2, tokens=0, revisions=1, iterations=2)
    b1 = make_revision(b, number=1, steps=[{"id": "s1", "capability": "search_documents", "arguments": {"q": "x"}},
                                           {"id": "s2", "capability": "create_ticket", "arguments": {"title": "t"}}])
    s = make_step(b1, arguments={"q": "travel"}, arguments_hash="h-travel")
    make_attempt(s, number=1, output={"documents": [{"id": "POL-7", "title": "Travel"}]})
    s = make_step(b1, index=1, capability="create_ticket", arguments={"title": "t"}, arguments_hash="h-t")
    make_attempt(s, number=1, status="terminal", error_code="permission_denied", error_message="not allowed")
    return a, b


@pytest.mark.django_db
class TestComparePage:
    def test_it_aligns_the_steps_and_diffs_arguments_and_outcomes(self, two_runs):
        from runs.trace.compare_page import compare_page

        a, b = two_runs
        page = compare_page(a, b)
        rows = page.rows_page.object_list
        assert [r.row.match for r in rows] == ["matched", "only_a", "only_b"]
        first = rows[0]
        assert first.row.a.label == "r1·s1" and first.row.b.label == "r1·s1"
        assert first.arguments.same is True
        # A's s1 ended with no documents, B's with POL-7: the outcome diff says so, line by line.
        assert first.outcome.same is False
        added = [line.text for line in first.outcome.lines if line.kind == "added"]
        assert any('"id": "POL-7"' in text for text in added)
        assert [c.number for c in first.row.a.attempts] == [1, 2] and first.row.a.attempts[0].error_code == "timeout"
        # A step only one run made: its arguments against nothing.
        assert rows[1].arguments.same is False and rows[2].row.b.capability == "create_ticket"
        assert page.summary.matched == 1 and page.summary.only_a == 1 and page.summary.only_b == 1

    def test_a_failed_outcome_is_compared_by_status_code_and_message(self, two_runs):
        from runs.trace.compare_page import compare_page

        a, b = two_runs
        failed = compare_page(a, b).rows_page.object_list[2].outcome
        assert any('"error_code": "permission_denied"' in line.text for line in failed.lines)

    def test_usage_stop_reasons_and_plans_are_side_by_side(self, two_runs):
        from runs.trace.compare_page import compare_page

        a, b = two_runs
        page = compare_page(a, b)
        usage = {u.name: u for u in page.usage}
        assert (usage["tokens"].a, usage["tokens"].b, usage["tokens"].delta) == (1200, 0, -1200)
        assert usage["attempts"].a == 3 and usage["steps"].b == 2
        assert [r.number for r in page.a.revisions] == [1, 2]
        assert page.a.revisions[1].reason_code == "result_not_found"
        assert page.b.run.stop_reason == "terminal_failure:permission_denied"

    def test_differences_only_leaves_out_the_rows_that_are_alike(self, two_runs, make_run, make_revision, make_step,
                                                                make_attempt):
        from runs.trace.compare_page import compare_page

        a, b = two_runs
        assert compare_page(a, b, differences_only=True).rows_page.paginator.count == 3
        twin = make_run(status="completed")
        step = make_step(make_revision(twin), arguments={"q": "travel"}, arguments_hash="h-travel")
        make_attempt(step, number=1, output={"documents": [{"id": "POL-7", "title": "Travel"}]})
        page = compare_page(b, twin, differences_only=True)
        assert [r.row.match for r in page.rows_page.object_list] == ["only_a"]
        assert page.summary.differing == 1 and page.summary.matched == 1

    def test_a_large_stored_output_is_read_only_up_to_the_cap(self, two_runs, make_run, make_revision, make_step,
                                                              make_attempt):
        import hashlib

        from capabilities.models import StoredOutput
        from runs.trace import compare_page as module

        a, _ = two_runs
        big = json.dumps({"rows": [{"n": n, "text": "x" * 40} for n in range(20_000)]}, separators=(",", ":"))
        ref = StoredOutput.objects.create(sha256=hashlib.sha256(big.encode()).hexdigest(), size_bytes=len(big),
                                          content=big)
        other = make_run(status="completed")
        step = make_step(make_revision(other), arguments={"q": "travel"}, arguments_hash="h-travel")
        make_attempt(step, number=1, output={"preview": big[:500], "size_bytes": len(big)}, output_ref=ref)
        with CaptureQueriesContext(__import__("django.db").db.connection) as queries:
            page = module.compare_page(a, other)
        outcome = page.rows_page.object_list[0].outcome
        assert outcome.same is False
        assert any("only its first" in note for note in outcome.notes)
        assert len(queries) <= 12  # a fixed number, whatever the runs' size

    def test_a_long_run_is_paged(self, make_run, make_revision, make_step, make_attempt):
        from runs.trace.compare_page import compare_page

        runs = []
        for _ in range(2):
            run = make_run(status="completed")
            revision = make_revision(run)
            for i in range(30):
                make_attempt(make_step(revision, index=i, key=f"s{i + 1}"), number=1, output={"i": i})
            runs.append(run)
        page = compare_page(*runs, page_number=2)
        assert page.rows_page.paginator.count == 30 and len(page.rows_page.object_list) == 5
        assert page.rows_page.object_list[0].row.position == 26


@pytest.mark.django_db
class TestComparePageView:
    def test_it_shows_both_runs_their_steps_and_the_diffs(self, two_runs, viewer, client_for):
        a, b = two_runs
        response = client_for(viewer).get(f"/runs/compare/?a={a.pk}&b={b.pk}")
        assert response.status_code == 200
        html = response.content.decode()
        assert f"Run #{a.pk}" in html and f"run #{b.pk}" in html
        assert "terminal_failure:permission_denied" in html and "result_not_found" in html
        assert 'class="dl added"' in html and "POL-7" in html
        assert "not in B" in html and "not in A" in html

    def test_htmx_gets_the_steps_only(self, two_runs, viewer, client_for):
        a, b = two_runs
        response = client_for(viewer).get(f"/runs/compare/?a={a.pk}&b={b.pk}&differences=1", HTTP_HX_REQUEST="true")
        html = response.content.decode()
        assert html.lstrip().startswith('<section aria-labelledby="steps-heading" id="compare-steps">')
        assert "Show every step" in html

    def test_the_list_form_sends_two_runs_and_lands_on_the_page(self, two_runs, viewer, client_for):
        a, b = two_runs
        response = client_for(viewer).get(f"/runs/compare/?run={a.pk}&run={b.pk}")
        assert response.status_code == 302 and response["Location"] == f"/runs/compare/?a={a.pk}&b={b.pk}"

    @pytest.mark.parametrize("query,words", [
        ("", "“a” is missing"), ("a=1", "“b” is missing"), ("a=x&b=2", "“a” must be a run id"),
        ("a=1&b=-3", "“b” must be a run id"), ("a=4&b=4", "the same run"), ("run=1", "you ticked 1"),
        ("run=1&run=2&run=3", "you ticked 3"), ("run=1&run=zz", "“b” must be a run id"),
    ])
    def test_bad_input_is_a_400_that_says_what_is_wrong(self, viewer, client_for, query, words):
        response = client_for(viewer).get(f"/runs/compare/?{query}")
        assert response.status_code == 400
        assert words in response.content.decode()

    def test_a_missing_run_is_a_404_naming_it(self, two_runs, viewer, client_for):
        a, _ = two_runs
        response = client_for(viewer).get(f"/runs/compare/?a={a.pk}&b=999999")
        assert response.status_code == 404 and "There is no run #999999 (b)." in response.content.decode()

    def test_only_people_who_may_view_runs_may_compare_them(self, two_runs, nobody, client_for):
        from django.test import Client

        a, b = two_runs
        assert Client().get(f"/runs/compare/?a={a.pk}&b={b.pk}").status_code == 302  # to the login page
        assert client_for(nobody).get(f"/runs/compare/?a={a.pk}&b={b.pk}").status_code == 403

    def test_the_runs_list_has_a_compare_form(self, two_runs, viewer, client_for):
        a, b = two_runs
        html = client_for(viewer).get("/runs/?evaluation_runs=show").content.decode()
        assert 'action="/runs/compare/"' in html and f'name="run" value="{a.pk}"' in html

    def test_an_evaluations_twin_runs_link_to_their_comparison(self, two_runs, viewer, client_for):
        from evaluation.models import Evaluation, EvaluationResult
        from evaluation.services import evaluation_suites_sync

        planning, direct = two_runs
        suite = evaluation_suites_sync()[0]
        evaluation = Evaluation.objects.create(suite=suite, started_by=viewer, status="completed")
        for mode, run in (("planning", planning), ("direct", direct)):
            EvaluationResult.objects.create(evaluation=evaluation, task="travel", mode=mode, run=run,
                                            verified_success=mode == "planning", status=run.status)
        client = client_for(viewer)
        link = f"/runs/compare/?a={direct.pk}&amp;b={planning.pk}"  # direct is A, planning B, as the table reads
        assert link in client.get(f"/evaluations/runs/{planning.pk}/twins/").content.decode()
        assert link in client.get(f"/evaluations/runs/{direct.pk}/twins/").content.decode()
        assert link in client.get(f"/evaluations/{evaluation.pk}/").content.decode()

    def test_a_fork_and_its_source_link_to_their_comparison(self, two_runs, viewer, client_for):
        from runs.models import Run

        source, fork = two_runs
        Run.objects.filter(pk=fork.pk).update(forked_from=source, forked_at=2)
        client = client_for(viewer)
        link = f"/runs/compare/?a={source.pk}&amp;b={fork.pk}"
        assert link in client.get(f"/runs/{fork.pk}/").content.decode()
        assert link in client.get(f"/runs/{source.pk}/").content.decode()
