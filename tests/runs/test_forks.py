"""Forking a run from one of its calls and resuming a stopped one (runs.forks): the service, the API, the page.

The worker's half (a fork runs to its end, a side effect before the fork point never repeats) is in
tests/runs/test_forks_worker.py.
"""
import pytest

from core.models import AuditEvent
from runs import checkpoint
from runs.forks import run_fork
from runs.models import Reconciliation, Run

UNKNOWN = "terminal_failure:outcome_unknown"
TICKET = {"title": "Badge reader"}


@pytest.fixture
def source(make_run, make_revision, make_step, make_attempt, operator):
    """Stopped after three calls: a search (ok), a ticket (committed), a search (failed)."""
    run = make_run(owner=operator, status="stopped", stop_reason="terminal_failure:not_found",
                   planner_config={"plans": [[{"capability": "search_documents", "arguments": {"q": "x"}}]]})
    revision = make_revision(run)
    search = make_step(revision, arguments={"q": "travel"})
    ticket = make_step(revision, index=1, capability="create_ticket", arguments=TICKET)
    lookup = make_step(revision, index=2, arguments={"q": "badge"})
    make_attempt(search, output={"documents": [{"id": "POL-7"}]})
    make_attempt(ticket, output={"ticket_id": 7}, side_effect_status="committed", idempotency_key="key-ticket",
                 state_changed=True)
    make_attempt(lookup, status="terminal", error_code="not_found", error_category="request",
                 decision="stop_terminal_failure")
    return run


def _state(run):
    return checkpoint.load(Run.objects.get(pk=run.pk))


class TestTheService:
    def test_a_resume_inherits_every_call_as_history_and_asks_the_planner(self, source, operator, manual_advance):
        fork = run_fork(run_id=source.pk, user=operator)
        assert (fork.forked_from_id, fork.forked_at, fork.owner) == (source.pk, 4, operator)
        state = _state(fork)
        assert [e.capability for e in state.history] == ["search_documents", "create_ticket", "search_documents"]
        assert state.settled_keys == ("key-ticket",) and state.key_scope == str(source.pk)
        assert state.planning.reason_code == "new_information" and "resumed run" in state.planning.reason
        # Found by the completion criteria's capability before the fork point: the completion check sees it.
        assert state.latest_ok_outputs == {"search_documents": {"documents": [{"id": "POL-7"}]}}
        assert (state.usage.tool_calls, fork.tool_calls) == (0, 0)   # budgets start afresh
        event = AuditEvent.objects.get(action="run.forked")
        assert event.actor == operator and event.details["source"] == source.pk and event.details["resumed"]

    def test_a_fork_before_a_call_inherits_only_the_calls_before_it(self, source, operator, manual_advance):
        fork = run_fork(run_id=source.pk, user=operator, at=2, budgets={"max_iterations": 3, "deadline_s": 30})
        state = _state(fork)
        assert [e.capability for e in state.history] == ["search_documents"]
        assert state.settled_keys == () and state.budgets.max_iterations == 3
        assert "before its call 2" in state.planning.reason
        by_uid = run_fork(run_id=source.pk, user=operator, attempt=source.attempts.order_by("started_at")[2].uid)
        assert by_uid.forked_at == 3

    def test_a_fork_of_a_fork_keeps_the_first_runs_keys_history_and_settled_effects(self, source, operator, manual_advance):
        fork = run_fork(run_id=source.pk, user=operator)
        Run.objects.filter(pk=fork.pk).update(status="stopped", stop_reason="stalled")
        again = run_fork(run_id=fork.pk, user=operator)
        state = _state(again)
        assert state.key_scope == str(source.pk)
        # What the fork inherited is inherited again: the history, and the side effects never to repeat.
        assert state.settled_keys == ("key-ticket",) and len(state.history) == 3

    @pytest.mark.parametrize("at", [0, 5, -1, True, "2"])
    def test_a_fork_point_that_does_not_exist_is_refused_and_nothing_changes(self, source, operator, at):
        from core.errors import InvalidInput

        with pytest.raises(InvalidInput) as refused:
            run_fork(run_id=source.pk, user=operator, at=at)
        assert "at" in refused.value.fields
        assert not Run.objects.filter(forked_from=source).exists() and not AuditEvent.objects.filter(
            action="run.forked").exists()

    def test_another_users_run_is_refused(self, source, roles, manual_advance):
        from core.errors import NotAllowed
        from tests.conftest import _make_user

        stranger = _make_user("sam", "operator")
        with pytest.raises(NotAllowed):
            run_fork(run_id=source.pk, user=stranger)
        assert not Run.objects.filter(forked_from=source).exists()

    def test_a_viewer_may_not_fork(self, source, viewer):
        from core.errors import NotAllowed

        with pytest.raises(NotAllowed):
            run_fork(run_id=source.pk, user=viewer)

    def test_a_run_still_running_a_gateway_session_or_an_evaluations_run_cannot_be_forked(self, make_run, operator):
        from core.errors import Conflict
        from evaluation.models import Evaluation
        from evaluation.services import evaluation_suites_sync

        evaluation = Evaluation.objects.create(suite=evaluation_suites_sync()[0], started_by=operator)
        for run in (make_run(owner=operator, status="running"),
                    make_run(owner=operator, status="stopped", planner="gateway"),
                    make_run(owner=operator, status="stopped", evaluation=evaluation)):
            with pytest.raises(Conflict):
                run_fork(run_id=run.pk, user=operator)

    def test_new_budgets_and_planner_settings_are_validated(self, source, operator):
        from core.errors import InvalidInput

        with pytest.raises(InvalidInput) as refused:
            run_fork(run_id=source.pk, user=operator, budgets={"max_iterations": -1})
        assert "budgets.max_iterations" in refused.value.fields
        with pytest.raises(InvalidInput) as refused:
            run_fork(run_id=source.pk, user=operator, planner_config={"plans": []})
        assert "planner_config" in refused.value.fields


class TestUnknownOutcomes:
    @pytest.fixture
    def unknown(self, make_run, make_revision, make_step, make_attempt, operator):
        run = make_run(owner=operator, status="stopped", stop_reason=UNKNOWN, planner="rules")
        revision = make_revision(run)
        make_attempt(make_step(revision, arguments={"q": "travel"}), output={"documents": []})
        ticket = make_attempt(make_step(revision, index=1, capability="create_ticket", arguments=TICKET),
                              status="retryable", error_code="timeout", side_effect_status="unknown",
                              idempotency_key="key-unknown", decision="stop_terminal_failure")
        Run.objects.filter(pk=run.pk).update(stop_attempt=ticket)
        run.refresh_from_db()
        return run

    def test_an_unreconciled_unknown_side_effect_cannot_be_inherited(self, unknown, operator):
        from core.errors import Conflict

        with pytest.raises(Conflict, match="reconcile"):
            run_fork(run_id=unknown.pk, user=operator)
        assert run_fork(run_id=unknown.pk, user=operator, at=2).forked_at == 2  # before it: fine

    def test_found_committed_the_effect_is_settled_and_never_sent_again(self, unknown, operator, manual_advance):
        Reconciliation.objects.create(run=unknown, attempt=unknown.stop_attempt, committed=True,
                                      evidence="T-7 exists", decided_by=operator)
        state = _state(run_fork(run_id=unknown.pk, user=operator))
        last = state.history[-1].observation
        assert (last.status.value, last.side_effect.value) == ("ok", "committed")
        assert last.output == {"reconciliation": {"reconciled_by": "otto", "committed": True,
                                                  "evidence": "T-7 exists"}}
        assert state.settled_keys == ("key-unknown",)
        assert "found the unknown side effect committed" in state.planning.reason

    def test_found_not_committed_it_may_be_done_again(self, unknown, operator, manual_advance):
        Reconciliation.objects.create(run=unknown, attempt=unknown.stop_attempt, committed=False,
                                      evidence="no ticket", decided_by=operator)
        state = _state(run_fork(run_id=unknown.pk, user=operator))
        last = state.history[-1].observation
        assert (last.status.value, last.side_effect.value) == ("retryable", "not_committed")
        assert "not committed: no ticket" in last.error_message and state.settled_keys == ()


class TestTheApi:
    def test_it_forks_and_answers_the_new_run(self, api_for, source, operator, manual_advance):
        response = api_for(operator).post(f"/api/runs/{source.pk}/fork/",
                                          {"at": 3, "budgets": {"max_iterations": 5, "deadline_s": 60}},
                                          format="json")
        assert response.status_code == 201, response.json()
        body = response.json()
        assert (body["forked_from"], body["forked_at"], body["budgets"]["max_iterations"]) == (source.pk, 3, 5)
        assert api_for(operator).get(f"/api/runs/{source.pk}/").json()["forked_from"] is None

    def test_bad_input_is_a_4xx_naming_it_and_nothing_changes(self, api_for, source, operator, roles):
        from tests.conftest import _make_user

        api = api_for(operator)
        response = api.post(f"/api/runs/{source.pk}/fork/", {"at": 9}, format="json")
        assert response.status_code == 400 and "at" in response.json()["error"]["fields"]
        response = api.post(f"/api/runs/{source.pk}/fork/", {"at": 2, "from_step": 1}, format="json")
        assert response.status_code == 400 and response.json()["error"]["fields"] == {"from_step": "unknown field"}
        response = api.post(f"/api/runs/{source.pk}/fork/", {"attempt": "nope"}, format="json")
        assert response.status_code == 400 and "attempt" in response.json()["error"]["fields"]
        response = api.post(f"/api/runs/{source.pk}/fork/", {"planner": "gateway"}, format="json")
        assert response.status_code == 400 and "planner" in response.json()["error"]["fields"]
        assert api.post("/api/runs/999999/fork/", {}, format="json").status_code == 404
        stranger = api_for(_make_user("sam", "operator"))
        assert stranger.post(f"/api/runs/{source.pk}/fork/", {}, format="json").status_code == 403
        assert not Run.objects.filter(forked_from=source).exists()


class TestThePages:
    def test_the_trace_offers_resume_and_fork_here_and_the_fork_shows_what_it_inherited(
            self, client_for, source, operator, manual_advance):
        client = client_for(operator)
        page = client.get(f"/runs/{source.pk}/").content.decode()
        assert 'data-testid="resume"' in page and "Fork here" in page
        response = client.post(f"/runs/{source.pk}/fork/", {"at": "3"})
        fork = Run.objects.get(forked_from=source)
        assert response.status_code == 302 and response["Location"] == f"/runs/{fork.pk}/"
        page = client.get(f"/runs/{fork.pk}/").content.decode()
        assert f'href="/runs/{source.pk}/">run #{source.pk}</a>, before its call 3' in page
        assert page.count('class="attempt-row inherited"') == 2
        source_page = client.get(f"/runs/{source.pk}/").content.decode()
        assert f'href="/runs/{fork.pk}/">run #{fork.pk}</a> (before call 3' in source_page

    def test_a_bad_fork_point_says_why_on_the_trace(self, client_for, source, operator):
        response = client_for(operator).post(f"/runs/{source.pk}/fork/", {"at": "12"}, follow=True)
        assert "The fork point must be a call of the run" in response.content.decode()
        assert not Run.objects.filter(forked_from=source).exists()

    def test_a_viewer_sees_no_fork_forms_and_may_not_post(self, client_for, source, viewer):
        client = client_for(viewer)
        page = client.get(f"/runs/{source.pk}/").content.decode()
        assert "/fork/" not in page
        assert client.post(f"/runs/{source.pk}/fork/", {}).status_code == 403
