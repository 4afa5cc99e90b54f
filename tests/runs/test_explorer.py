"""The tool-call explorer, full-text search (FTS5 on SQLite, tsvector on PostgreSQL), the runs
list's `q`, and failure groups (fingerprints, folding at finish, live runs added in)."""
from __future__ import annotations

import pytest

from core.errors import InvalidInput
from runs import explorer, failures


def _failing(make_attempt, step, message, *, code="server_error", category="transient", http_status=503, **kw):
    fp = failures.fingerprint(capability=step.capability_name, error_code=code, error_category=category,
                              http_status=http_status, message=message)
    return make_attempt(step, status="retryable", error_code=code, error_category=category, error_message=message,
                        http_status=http_status, fingerprint=fp, **kw)


@pytest.fixture
def calls(make_run, make_revision, make_step, make_attempt):
    """Two finished runs: an ok search with a refund in its output, and two failures of one kind."""
    a = make_run(goal="Refund the duplicate order", status="completed")
    step = make_step(make_revision(a), arguments={"q": "duplicate refund"})
    ok = make_attempt(step, output={"documents": [{"id": "POL-7", "title": "Travel policy for contractors"}]},
                      signature='search_documents {"q":"duplicate refund"}')
    b = make_run(goal="Find the travel policy", status="stopped", stop_reason="stalled",
                 stop_detail="upstream kept failing")
    step_b = make_step(make_revision(b), capability="create_ticket")
    f1 = _failing(make_attempt, step_b, "upstream 10.0.0.7 returned 503 for request 9f2c1a7e5b3d")
    f2 = _failing(make_attempt, step_b, "upstream 10.0.0.9 returned 503 for request 77aa00bb11cc", number=2)
    failures.record_run_finished(run_id=b.pk)
    return {"a": a, "b": b, "ok": ok, "f1": f1, "f2": f2}


def _uids(filters) -> set[str]:
    return set(explorer.attempt_list(filters=filters).values_list("uid", flat=True))


class TestSearchTerms:
    def test_it_reads_words_and_quoted_phrases(self):
        assert explorer.search_terms('refund "travel policy" POL-7') == ["refund", "travel policy", "POL-7"]

    @pytest.mark.parametrize("query", ['"', "* ( ) : ^ NEAR", 'AND OR NOT "', "'--", "\x00"])
    def test_syntax_characters_are_only_text(self, query):
        explorer.search_terms(query)  # no error: they are text, and punctuation alone is no term

    def test_a_huge_query_is_a_field_error(self):
        with pytest.raises(InvalidInput) as caught:
            explorer.search_terms("x" * 5000)
        assert "q" in caught.value.fields

    def test_too_many_terms_is_a_field_error(self):
        with pytest.raises(InvalidInput):
            explorer.search_terms(" ".join(f"w{i}" for i in range(20)))


class TestExplorer:
    def test_it_searches_arguments_outputs_and_errors(self, calls):
        assert _uids(explorer.AttemptFilters(q="duplicate")) == {calls["ok"].uid}           # arguments
        assert _uids(explorer.AttemptFilters(q="contractors")) == {calls["ok"].uid}         # output
        assert _uids(explorer.AttemptFilters(q="upstream returned")) == {calls["f1"].uid, calls["f2"].uid}  # errors
        assert _uids(explorer.AttemptFilters(q='"travel policy"')) == {calls["ok"].uid}
        assert _uids(explorer.AttemptFilters(q='"policy travel"')) == set()                 # a phrase is in order
        assert _uids(explorer.AttemptFilters(q="refund nowhere")) == set()                  # every term must match

    @pytest.mark.parametrize("query", ['"', 'refund"', "NEAR(a b)", "* OR :", "a' OR 1=1 --", "\\", "(((", "é ü"])
    def test_hostile_queries_never_fail(self, calls, query):
        list(explorer.attempt_list(filters=explorer.AttemptFilters(q=query)))
        explorer.attempt_page(filters=explorer.AttemptFilters(q=f"{query} refund"))

    @pytest.mark.parametrize("query,status", [("upstream returned", ""), ("upstream returned", "retryable"),
                                              ("refund nowhere", ""), ("duplicate refund", "ok")])
    def test_a_page_of_several_terms_holds_what_the_search_matches(self, calls, query, status, monkeypatch):
        """Several terms are read along the list's order first on PostgreSQL (core.pagination.WalkFirst):
        walked short (one row) or long, the page is the search's matches, newest first."""
        filters = explorer.AttemptFilters(q=query, status=status)
        expected = list(explorer.attempt_list(filters=filters).values_list("uid", flat=True))
        for walks in ((1,), (1, 100)):
            monkeypatch.setattr(explorer, "SEARCH_WALKS", walks)
            page = explorer.attempt_page(filters=filters)
            assert [a.uid for a in page.object_list] == expected and page.count == len(expected)
            first = explorer.attempt_page(filters=filters, per_page=1)   # a page the longer walk fills
            assert [a.uid for a in first.object_list] == expected[:1] and first.has_next == (len(expected) > 1)

    def test_it_filters_by_the_columns(self, calls):
        assert _uids(explorer.AttemptFilters(status="retryable")) == {calls["f1"].uid, calls["f2"].uid}
        assert _uids(explorer.AttemptFilters(http_status=503, capability="create_ticket")) == {calls["f1"].uid,
                                                                                            calls["f2"].uid}
        assert _uids(explorer.AttemptFilters(error_code="timeout")) == set()
        assert _uids(explorer.AttemptFilters(owner=calls["a"].owner.username)) == {
            calls["ok"].uid, calls["f1"].uid, calls["f2"].uid}
        assert _uids(explorer.AttemptFilters(fingerprint=calls["f1"].fingerprint)) == {calls["f1"].uid, calls["f2"].uid}

    def test_it_filters_by_run_labels_agent_latency_and_time(self, calls):
        from datetime import timedelta

        from django.utils import timezone

        from runs.models import RunLabel

        RunLabel.objects.create(run=calls["b"], key="team", value="payments")
        assert _uids(explorer.AttemptFilters(labels=(("team", "payments"),))) == {calls["f1"].uid, calls["f2"].uid}
        assert _uids(explorer.AttemptFilters(agent="no-such-agent")) == set()
        assert _uids(explorer.AttemptFilters(latency_min_s=0.1, latency_max_s=0.3)) == {
            calls["ok"].uid, calls["f1"].uid, calls["f2"].uid}
        assert _uids(explorer.AttemptFilters(latency_min_s=5)) == set()
        assert _uids(explorer.AttemptFilters(started_from=timezone.now() + timedelta(minutes=1))) == set()

    def test_the_page_lists_calls_linking_into_their_trace(self, calls, client_for, viewer):
        response = client_for(viewer).get("/runs/calls/", {"q": "contractors"})
        body = response.content.decode()
        assert response.status_code == 200
        assert f'/runs/{calls["a"].pk}/?attempt={calls["ok"].uid}#attempt-{calls["ok"].uid}' in body
        assert calls["f1"].uid not in body

    def test_the_page_answers_a_bad_filter_with_400_naming_it(self, calls, client_for, viewer):
        response = client_for(viewer).get("/runs/calls/", {"q": "x" * 500})
        assert response.status_code == 400
        assert "Search" in response.content.decode()
        assert client_for(viewer).get("/runs/calls/", {"after": "junk"}).status_code == 400

    def test_the_page_pages_with_keyset_cursors(self, calls, client_for, viewer, monkeypatch):
        monkeypatch.setattr(explorer, "ATTEMPTS_PER_PAGE", 2)
        first = client_for(viewer).get("/runs/calls/")
        assert "Next →" in first.content.decode()
        assert first.context["page"].next_cursor

    def test_the_api_lists_calls_with_cursors_and_refuses_unknown_parameters(self, calls, api_for, viewer):
        api = api_for(viewer)
        page = api.get("/api/calls/", {"page_size": 2}).json()
        assert len(page["results"]) == 2 and page["next"] and page["count"] == 3
        rest = api.get("/api/calls/", {"page_size": 2, "after": page["next"]}).json()
        assert len(rest["results"]) == 1 and rest["next"] is None
        assert api.get("/api/calls/", {"q": "contractors"}).json()["results"][0]["uid"] == calls["ok"].uid
        assert api.get("/api/calls/", {"colour": "red"}).status_code == 400
        bad = api.get("/api/calls/", {"q": "x" * 500})
        assert bad.status_code == 400 and "q" in str(bad.json())
        assert api.get("/api/calls/", {"after": "%%%"}).status_code == 400

    def test_nobody_without_view_permission_sees_calls(self, calls, api_for, nobody, client_for):
        assert api_for(nobody).get("/api/calls/").status_code == 403
        assert client_for(nobody).get("/runs/calls/").status_code == 403


class TestRunsListQ:
    def test_q_searches_goals_stop_details_and_call_text(self, calls, client_for, api_for, viewer):
        def ids(query):
            return {r["id"] for r in api_for(viewer).get("/api/runs/", {"q": query}).json()["results"]}

        assert ids("duplicate order") == {calls["a"].pk}          # goal
        assert ids("kept failing") == {calls["b"].pk}             # stop detail
        assert ids("contractors") == {calls["a"].pk}              # a call's output
        assert ids("upstream") == {calls["b"].pk}                 # a call's error
        page = client_for(viewer).get("/runs/", {"q": "contractors"}).content.decode()
        assert "Refund the duplicate order" in page and "Find the travel policy" not in page

    @pytest.mark.parametrize("query", ["upstream returned", "contractors", "duplicate order", "nowhere at all"])
    def test_terms_common_by_their_share_of_the_latest_calls_probe_runs_in_order(self, calls, api_for, viewer,
                                                                                 monkeypatch, query):
        """On PostgreSQL, terms whose share of the latest calls says they match more than SELECTIVE_MATCHES
        calls skip reading their run ids: the list probes runs in its order. The same runs either way."""
        from django.db import connection

        def ids():
            return {r["id"] for r in api_for(viewer).get("/api/runs/", {"q": query}).json()["results"]}

        expected = ids()
        monkeypatch.setattr(explorer, "SELECTIVE_MATCHES", 0)   # any match in the walk makes the terms common
        common = explorer._common(explorer.search_terms(query))
        assert common == (connection.vendor == "postgresql" and query != "nowhere at all"
                          and query != "duplicate order")   # a goal is not a call's text
        assert ids() == expected

    def test_a_bad_q_is_a_400(self, calls, client_for, api_for, viewer):
        assert api_for(viewer).get("/api/runs/", {"q": "x" * 500}).status_code == 400
        assert client_for(viewer).get("/runs/", {"q": "x" * 500}).status_code == 400


class TestFingerprints:
    def test_numbers_ids_and_uuids_are_taken_out(self):
        assert (failures.normalize_message("order 1234 failed at 10.0.0.7 (req 3f2a9c0d7b1e, "
                                           "id 123e4567-e89b-12d3-a456-426614174000)")
                == "order <n> failed at <n> (req <id>, id <uuid>)")

    def test_one_failure_with_other_ids_is_one_group_and_other_causes_are_not(self):
        same = [failures.fingerprint(capability="c", error_code="server_error", error_category="transient",
                                     http_status=503, message=f"request {n} to node-{n % 7} failed") for n in range(9)]
        assert len(set(same)) == 1
        other = {failures.fingerprint(capability="c", error_code="server_error", error_category="transient",
                                      http_status=500, message="request 1 to node-1 failed"),
                 failures.fingerprint(capability="d", error_code="server_error", error_category="transient",
                                      http_status=503, message="request 1 to node-1 failed"),
                 failures.fingerprint(capability="c", error_code="server_error", error_category="transient",
                                      http_status=503, message="quota exceeded")}
        assert len(other | {same[0]}) == 4
        assert failures.fingerprint(capability="c", error_code="", error_category="", http_status=None,
                                    message="") == ""


class TestFailureGroups:
    def test_a_finished_runs_failures_are_one_group_with_counts_and_trend(self, calls):
        rows, more = failures.group_list(filters=failures.GroupFilters())
        assert not more and len(rows) == 1
        group = rows[0]
        assert (group.capability_name, group.error_code, group.http_status) == ("create_ticket", "server_error", 503)
        assert (group.attempts, group.runs) == (2, 1)
        assert group.message == "upstream <n> returned <n> for request <id>"
        assert group.trend[-1] == 2 and sum(group.trend) == 2

    def test_live_runs_are_added_in_and_a_second_run_counts_once(self, calls, make_run, make_revision, make_step,
                                                                  make_attempt):
        live = make_run(status="running")
        step = make_step(make_revision(live), capability="create_ticket")
        _failing(make_attempt, step, "upstream 10.1.1.1 returned 503 for request 0011223344aa")
        _failing(make_attempt, step, "upstream 10.1.1.1 returned 503 for request 0011223344ab", number=2)
        _failing(make_attempt, step, "a brand new problem", code="conflict", category="permanent", http_status=409,
                 number=3)
        rows, _ = failures.group_list(filters=failures.GroupFilters())
        assert rows[0].new and rows[0].error_code == "conflict"
        known = next(r for r in rows if r.error_code == "server_error")
        assert (known.attempts, known.runs, known.live_attempts) == (4, 2, 2)
        # Once the live run finishes, the same counts come from the groups alone.
        live.status, live.stop_reason = "stopped", "stalled"
        live.save(update_fields=["status", "stop_reason"])
        failures.record_run_finished(run_id=live.pk)
        again = {r.error_code: (r.attempts, r.runs, r.live_attempts) for r in failures.group_list(
            filters=failures.GroupFilters())[0]}
        assert again == {"server_error": (4, 2, 0), "conflict": (1, 1, 0)}

    def test_rebuild_recounts_the_same(self, calls):
        before = [(r.fingerprint, r.attempts, r.runs) for r in failures.group_list(filters=failures.GroupFilters())[0]]
        failures.rebuild()
        after = [(r.fingerprint, r.attempts, r.runs) for r in failures.group_list(filters=failures.GroupFilters())[0]]
        assert before == after

    def test_the_page_and_api_list_groups_linking_to_the_explorer(self, calls, client_for, api_for, viewer):
        body = client_for(viewer).get("/runs/failures/").content.decode()
        assert f"/runs/calls/?fingerprint={calls['f1'].fingerprint}" in body
        answer = api_for(viewer).get("/api/failure-groups/", {"capability": "create_ticket"}).json()
        assert answer["results"][0]["attempts"] == 2 and answer["results"][0]["runs"] == 1
        assert api_for(viewer).get("/api/failure-groups/", {"sort": "sideways"}).status_code == 400
        assert api_for(viewer).get("/api/failure-groups/", {"colour": "red"}).status_code == 400
        assert client_for(viewer).get("/runs/failures/", {"http_status": "abc"}).status_code == 400


@pytest.mark.skipif("config.getoption('--ds', default='') and False")
class TestOnThisDatabase:
    def test_the_search_index_is_there(self, db):
        from django.db import connection

        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute("SELECT 1 FROM pg_indexes WHERE indexname = 'attempt_search_gin_idx'")
            else:
                cursor.execute("SELECT 1 FROM sqlite_master WHERE name = 'runs_attempt_fts'")
            assert cursor.fetchone()
