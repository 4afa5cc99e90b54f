"""A pass's write is described once and rendered for each database: the one PostgreSQL statement
and the ORM's statements write the same rows."""
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs import checkpoint, services
from runs.models import Attempt, Decision, PlanRevision, Run, Step
from runs.worker import engine
from runs.worker.persistence import PassWriter


@pytest.fixture
def demo_capabilities(db, manual_advance):
    from capabilities.kinds.python.sync import python_capabilities_sync

    python_capabilities_sync()


def start(owner):
    steps = [{"id": f"s{i}", "capability": "search_documents", "arguments": {"q": f"travel {i}"}} for i in range(3)]
    return services.run_start(owner=owner, goal="Three searches", budgets={"deadline_s": 60, "max_iterations": 6},
                              completion={"capability": "search_documents", "path": "documents.0.id", "equals": "never"},
                              planner="scripted", planner_config={"plans": [steps]})


def trace(run):
    """What the passes wrote, without ids, moments or anything unique to the run."""
    run = Run.objects.get(pk=run.pk)
    return {
        "run": (run.status, run.stop_reason, run.iterations, run.revisions, run.tool_calls, run.retries,
                run.approvals_requested, run.repeated_attempts, run.lease_owner, checkpoint.load(run).to_dict()["steps"]),
        "revisions": list(PlanRevision.objects.filter(run=run).order_by("number").values_list(
            "number", "accepted", "reason_code", "steps", "capabilities_seen", "proposed_by_id")),
        "steps": list(Step.objects.filter(run=run).order_by("index").values_list(
            "index", "key", "status", "progress", "capability_name", "capability_version_id", "arguments_hash")),
        "attempts": list(Attempt.objects.filter(run=run).order_by("started_at", "id").values_list(
            "number", "kind", "capability_name", "capability_version_id", "step__key", "status", "error_code",
            "signature_hash", "in_flight", "worker", "side_effect_status", "repeated_without_progress")),
        "decisions": list(Decision.objects.filter(run=run).order_by("id").values_list(
            "decision", "reason", "attempt__number", "attempt__step__key")),
    }


@pytest.mark.django_db
def test_the_one_statement_and_the_orm_write_the_same_rows(operator, demo_capabilities, monkeypatch):
    one = start(operator)
    with CaptureQueriesContext(connection) as queries:
        engine.run_advance(run_id=one.pk, worker="w")
    if connection.vendor == "postgresql":  # elsewhere both runs go through the ORM: the same rows all the same
        assert sum(q["sql"].startswith("WITH r AS") for q in queries) >= 3  # the first plan, then each attempt
    monkeypatch.setattr(PassWriter, "_common_pass", lambda self, write: None)  # every pass through the ORM
    other = start(operator)
    with CaptureQueriesContext(connection) as queries:
        engine.run_advance(run_id=other.pk, worker="w")
    assert not any(q["sql"].startswith("WITH r AS") for q in queries)
    written = trace(one)
    assert written["attempts"] and written["decisions"] and written["steps"]
    assert written == trace(other)
