"""A person reconciles a run stopped terminal_failure:outcome_unknown: committed or not, with evidence, audited."""
import pytest

from core.models import AuditEvent
from runs.models import Reconciliation

UNKNOWN = "terminal_failure:outcome_unknown"


@pytest.fixture
def unknown_run(make_run, make_revision, make_step, make_attempt, operator):
    run = make_run(owner=operator, status="stopped", stop_reason=UNKNOWN,
                   stop_detail="step s1: create_ticket timed out; its outcome is unknown")
    step = make_step(make_revision(run), capability="create_ticket", arguments={"title": "x"})
    attempt = make_attempt(step, status="retryable", error_code="timeout", side_effect_status="unknown",
                           decision="stop_terminal_failure")
    run.stop_attempt = attempt
    run.save(update_fields=["stop_attempt"])
    return run


class TestThePage:
    def test_the_owner_records_what_they_found_and_the_run_says_so(self, client_for, operator, unknown_run):
        client = client_for(operator)
        page = client.get(f"/runs/{unknown_run.pk}/").content.decode()
        assert f'action="/runs/{unknown_run.pk}/reconcile/"' in page
        assert "Resume the run from the unknown call" in page
        response = client.post(f"/runs/{unknown_run.pk}/reconcile/",
                               {"committed": "yes", "evidence": "Ticket T-7 exists in the helpdesk, created 10:02"})
        assert response.status_code == 302
        found = Reconciliation.objects.get(run=unknown_run)
        assert found.committed and found.decided_by == operator and found.attempt == unknown_run.stop_attempt
        event = AuditEvent.objects.get(action="run.reconciled")
        assert event.actor == operator and event.details["committed"] is True
        page = client.get(f"/runs/{unknown_run.pk}/").content.decode()
        assert "found the side effect" in page and "<strong>committed</strong>" in page
        assert '<a href="#reconciliation">by otto: committed</a>' in page  # in the stop box too
        assert "Ticket T-7 exists" in page and f'action="/runs/{unknown_run.pk}/reconcile/"' not in page

    def test_a_second_finding_is_refused(self, client_for, operator, unknown_run):
        client = client_for(operator)
        client.post(f"/runs/{unknown_run.pk}/reconcile/", {"committed": "no", "evidence": "no row"})
        response = client.post(f"/runs/{unknown_run.pk}/reconcile/", {"committed": "yes", "evidence": "oops"},
                               follow=True)
        assert "already been reconciled" in response.content.decode()
        assert Reconciliation.objects.get().committed is False

    def test_a_viewer_may_not_and_sees_no_form(self, client_for, viewer, unknown_run):
        client = client_for(viewer)
        assert "reconcile/" not in client.get(f"/runs/{unknown_run.pk}/").content.decode()
        assert client.post(f"/runs/{unknown_run.pk}/reconcile/", {"committed": "no", "evidence": "x"}).status_code == 403
        assert not Reconciliation.objects.exists()

    def test_a_run_that_did_not_stop_on_an_unknown_outcome_has_nothing_to_reconcile(self, client_for, operator,
                                                                                    make_run):
        run = make_run(owner=operator, status="stopped", stop_reason="stalled")
        response = client_for(operator).post(f"/runs/{run.pk}/reconcile/", {"committed": "no", "evidence": "x"},
                                             follow=True)
        assert "nothing to reconcile" in response.content.decode()


class TestTheApi:
    def test_it_records_and_answers_what_may_follow(self, api_for, operator, unknown_run):
        response = api_for(operator).post(f"/api/runs/{unknown_run.pk}/reconcile/",
                                          {"committed": False, "evidence": "no ticket with that key"}, format="json")
        assert response.status_code == 201, response.json()
        body = response.json()
        assert body["committed"] is False and body["decided_by"] == operator.username
        assert "Resume the run from the unknown call" in body["next"]

    def test_evidence_is_required_and_unknown_fields_are_named(self, api_for, operator, unknown_run):
        api = api_for(operator)
        assert api.post(f"/api/runs/{unknown_run.pk}/reconcile/", {"committed": True, "evidence": "  "},
                        format="json").status_code == 400
        response = api.post(f"/api/runs/{unknown_run.pk}/reconcile/",
                            {"committed": True, "evidence": "seen", "resume": True}, format="json")
        assert response.status_code == 400 and response.json()["error"]["fields"] == {"resume": "unknown field"}
        assert not Reconciliation.objects.exists()
