"""A recorded run becomes a scenario file; run_scenario on it reproduces the run's decisions and stop."""
import contextlib
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from runs import engine, services
from runs.models import Approval, Decision, Run
from runs.scenario_export import run_scenario_export

COUNTS = ("tool_calls", "revisions", "retries", "approvals_requested", "tokens", "side_effects_committed")


@pytest.fixture
def registry(db):
    from capabilities.sync import python_capabilities_sync

    python_capabilities_sync()


def _replay(tmp_path, run):
    """export_scenario RUN -o FILE, then run_scenario FILE --json, as an operator would."""
    path = tmp_path / f"run-{run.pk}.json"
    call_command("export_scenario", str(run.pk), "-o", str(path))
    from io import StringIO

    out = StringIO()
    with contextlib.suppress(SystemExit):  # a failed expectation: the assertions below say which
        call_command("run_scenario", str(path), "--json", stdout=out)
    return json.loads(out.getvalue())[0], json.loads(path.read_text())


def _assert_reproduced(run, replayed):
    assert replayed["passed"], replayed["failures"]
    assert replayed["stop_reason"] == run.stop_reason and replayed["status"] == run.status
    for field in COUNTS:
        assert replayed[field] == getattr(run, field), field


def _scripted(operator, plans, completion, **kw):
    return services.run_start(owner=operator, goal=kw.pop("goal", "Find the travel policy"), planner="scripted",
                              planner_config={"plans": plans}, completion=completion,
                              budgets=kw.pop("budgets", {"deadline_s": 120}), **kw)


READ_POLICY = {"capability": "get_document", "path": "id", "equals": "POL-7"}


@pytest.mark.django_db(transaction=True)
class TestExportInProcess:
    """Runs advanced by the engine in this process (the worker's code path without the broker)."""

    def _finish(self, run):
        engine.run_advance(run_id=run.pk, worker="test")
        run.refresh_from_db()
        return run

    def test_a_replanned_run_replays_to_the_same_stop_and_counts(self, registry, operator, manual_advance,
                                                                  tmp_path):
        run = self._finish(_scripted(operator, [
            [{"capability": "search_documents", "arguments": {"q": "zzqx nothing"}}],
            [{"capability": "get_document", "arguments": {"id": "POL-7"}}]], READ_POLICY))
        assert run.stop_reason == "completed" and run.revisions == 2
        replayed, scenario = _replay(tmp_path, run)
        _assert_reproduced(run, replayed)
        assert [c["name"] for c in scenario["capabilities"]] == ["get_document", "search_documents"]
        search = next(c for c in scenario["capabilities"] if c["name"] == "search_documents")
        assert search["responses"][0]["return"]["documents"] == []
        assert len(scenario["planner"]["plans"]) == 2

    def test_a_terminal_failure_replays(self, registry, operator, manual_advance, tmp_path):
        run = self._finish(_scripted(operator, [[{"capability": "get_document", "arguments": {"id": "NOPE"}}]],
                                     READ_POLICY))
        assert run.stop_reason == "terminal_failure:not_found"
        _assert_reproduced(run, _replay(tmp_path, run)[0])

    def test_a_rejected_plan_replays_as_written(self, registry, operator, manual_advance, tmp_path):
        run = self._finish(_scripted(operator, [[{"capability": "no_such_capability", "arguments": {}}],
                                                [{"capability": "no_such_capability", "arguments": {}}]],
                                     READ_POLICY))
        assert run.stop_reason == "plan_rejected"
        _assert_reproduced(run, _replay(tmp_path, run)[0])

    def test_an_approved_side_effect_replays_with_its_approval(self, registry, operator, second_operator,
                                                               manual_advance, tmp_path):
        run = _scripted(operator, [[{"capability": "create_ticket", "arguments": {"title": "Printer on fire"}}]],
                        {"capability": "create_ticket", "path": "ticket_id", "exists": True})
        self._finish(run)
        approval = Approval.objects.get(run=run, state="pending")
        services.approval_decide(approval_id=approval.pk, user=second_operator, approve=True)
        run = self._finish(run)
        assert run.stop_reason == "completed" and run.side_effects_committed == 1
        replayed, scenario = _replay(tmp_path, run)
        _assert_reproduced(run, replayed)
        assert scenario["approvals"] == [{"decision": "approve", "comment": ""}]
        assert scenario["owner_permissions"] == ["capabilities.create_ticket"]

    def test_the_rules_planner_replays(self, registry, operator, manual_advance, tmp_path):
        run = services.run_start(owner=operator, goal="Find the hotel per diem rules", planner="rules",
                                 completion={"capability": "get_document", "path": "id", "exists": True},
                                 budgets={"deadline_s": 120})
        run = self._finish(run)
        assert run.stop_reason == "completed" and run.revisions >= 2
        _assert_reproduced(run, _replay(tmp_path, run)[0])

    def test_a_re_proposed_idempotent_write_stalls_and_its_export_records_every_call(self, registry, operator,
                                                                                      manual_advance, tmp_path):
        # The callee answers state_changed: true each time, but it deduplicates the same key: the
        # second proposal changed nothing (design.md "A deduplicated answer changed nothing").
        from capabilities.models import CapabilityVersion

        CapabilityVersion.objects.filter(capability__name="create_ticket").update(requires_approval=False)
        write = {"capability": "create_ticket", "arguments": {"title": "Printer on fire"}}
        run = self._finish(_scripted(operator, [[{"id": f"open-{n}", **write}] for n in (1, 2, 3)], READ_POLICY))
        assert (run.stop_reason, run.stall_kind, run.tool_calls) == ("stalled", "repeated_without_progress", 2)
        decisions = list(Decision.objects.filter(run=run).values_list("attempt__repeated_without_progress",
                                                                      "decision"))
        assert decisions == [(False, "replan"), (True, "stop_stalled")]
        assert run.side_effects_committed == 1
        replayed, scenario = _replay(tmp_path, run)
        _assert_reproduced(run, replayed)
        create = next(c for c in scenario["capabilities"] if c["name"] == "create_ticket")
        assert len(create["responses"]) == run.tool_calls
        assert create["responses"][1]["deduplicated"] is True

    def test_the_command_refuses_an_unknown_run(self, db):
        with pytest.raises(CommandError, match="Run 999 does not exist"):
            call_command("export_scenario", "999")


@pytest.mark.django_db(transaction=True)
class TestPages:
    @pytest.fixture
    def run(self, registry, operator, manual_advance):
        run = _scripted(operator, [[{"capability": "search_documents", "arguments": {"q": "travel"}},
                                    {"capability": "get_document", "arguments": {"id": "POL-7"}}]], READ_POLICY)
        engine.run_advance(run_id=run.pk, worker="test")
        run.refresh_from_db()
        assert run.stop_reason == "completed"
        return run

    def test_the_trace_offers_the_export_and_the_download_is_the_scenario(self, client_for, viewer, run):
        client = client_for(viewer)
        assert f'href="/runs/{run.pk}/scenario.json"' in client.get(f"/runs/{run.pk}/").content.decode()
        response = client.get(f"/runs/{run.pk}/scenario.json")
        assert response.status_code == 200
        assert "attachment" in response["Content-Disposition"]
        assert response.json() == json.loads(json.dumps(run_scenario_export(run=run), default=str))

    def test_a_reviewer_changes_one_response_and_sees_the_other_decision(self, client_for, viewer, run):
        client = client_for(viewer)
        page = client.get(f"/runs/{run.pk}/what-if/")
        assert page.status_code == 200
        assert '<strong id="replayed-stop">completed</strong>' in page.content.decode()
        response = client.post(f"/runs/{run.pk}/what-if/", {"response": "get_document:0",
                                                             "replacement": '{"raise": "permission_denied"}'})
        assert response.status_code == 200
        body = response.content.decode()
        assert '<strong id="what-if-stop">terminal_failure:permission_denied</strong>' in body
        # Nothing was called or stored: the run's own record is unchanged.
        assert Decision.objects.filter(run=run).count() == 2
        assert Run.objects.get(pk=run.pk).stop_reason == "completed"

    @pytest.mark.parametrize("data, message", [
        ({"response": "get_document:0", "replacement": "{not json"}, "not valid JSON"),
        ({"response": "get_document:0", "replacement": '{"raise": "kaboom"}'}, "raise must be one of"),
        ({"response": "nope:3", "replacement": "{}"}, "Select a valid choice"),
    ])
    def test_a_bad_edit_is_a_400_with_the_reason(self, client_for, viewer, run, data, message):
        response = client_for(viewer).post(f"/runs/{run.pk}/what-if/", data)
        assert response.status_code == 400
        assert message in response.content.decode()

    def test_unknown_runs_are_404_and_anonymous_users_log_in(self, client, client_for, viewer, run):
        assert client_for(viewer).get("/runs/999999/what-if/").status_code == 404
        client.logout()
        assert client.get(f"/runs/{run.pk}/scenario.json").status_code == 302


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
class TestLiveRunsThroughAWorker:
    def _wait(self, wait_until, run):
        return wait_until(lambda: Run.objects.filter(pk=run.pk, finished_at__isnull=False).first(),
                          message="the run to finish")

    def test_a_scripted_run_with_a_replan_replays(self, celery_worker, registry, operator, wait_until, tmp_path):
        run = self._wait(wait_until, _scripted(operator, [
            [{"capability": "search_documents", "arguments": {"q": "zzqx nothing"}}],
            [{"capability": "get_document", "arguments": {"id": "POL-7"}}]], READ_POLICY))
        assert run.stop_reason == "completed"
        _assert_reproduced(run, _replay(tmp_path, run)[0])

    def test_a_rules_run_replays(self, celery_worker, registry, operator, wait_until, tmp_path):
        run = self._wait(wait_until, services.run_start(
            owner=operator, goal="Find the hotel per diem rules", planner="rules",
            completion={"capability": "get_document", "path": "id", "exists": True}, budgets={"deadline_s": 120}))
        assert run.stop_reason == "completed"
        _assert_reproduced(run, _replay(tmp_path, run)[0])
