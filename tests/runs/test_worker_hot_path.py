"""What a worker keeps between runs and passes, and what it no longer reads or writes when nothing asks for it."""
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from capabilities import egress
from capabilities.models import Capability
from capabilities.policy import capability_update
from runs import checkpoint, services
from runs.models import Attempt, Run, Step
from runs.worker import engine, leases
from runs.worker.adapters import DjangoRegistry
from runs.worker.persistence import PassWriter


@pytest.fixture
def demo_capabilities(db, manual_advance):
    from capabilities.kinds.python.sync import python_capabilities_sync

    python_capabilities_sync()


def start(owner):
    return services.run_start(owner=owner, goal="Find the travel policy", budgets={"deadline_s": 60},
                              completion={"capability": "search_documents", "path": "documents.0.id", "exists": True},
                              planner="scripted",
                              planner_config={"plans": [[{"capability": "search_documents", "arguments": {"q": "travel"}}]]})


@pytest.mark.django_db
class TestSpecsSharedAtOneRegistryVersion:
    def version(self, operator):
        run = start(operator)
        lease = leases.claim(run.pk, "probe")
        leases.release(lease)
        return lease.registry_version

    def test_two_slices_at_one_version_read_the_registry_once(self, operator, demo_capabilities):
        version = self.version(operator)
        first, second = DjangoRegistry(), DjangoRegistry()
        first.observe_version(version)
        second.observe_version(version)
        assert first.get("search_documents") is not None
        with CaptureQueriesContext(connection) as queries:
            spec = second.get("search_documents")
        assert len(queries) == 0 and spec is first.get("search_documents")

    def test_an_edit_moves_the_version_and_the_next_pass_reads_the_new_spec(self, operator, registry_admin,
                                                                           demo_capabilities):
        before = self.version(operator)
        registry = DjangoRegistry()
        registry.observe_version(before)
        assert registry.get("search_documents").timeout_s != 7
        capability_update(user=registry_admin, capability_id=Capability.objects.get(name="search_documents").pk,
                          policy={"timeout_s": 7})
        after = self.version(operator)
        assert after != before
        registry.observe_version(after)
        assert registry.get("search_documents").timeout_s == 7


@pytest.mark.django_db
class TestOncePerSlice:
    def test_the_claim_says_whether_a_call_is_in_flight(self, operator, demo_capabilities):
        run = start(operator)
        lease = leases.claim(run.pk, "w1")
        assert lease.in_flight is False
        writer = PassWriter(Run.objects.get(pk=run.pk), lease)
        with CaptureQueriesContext(connection) as queries:
            writer.load_interrupted()
        assert len(queries) == 0 and writer.interrupted() is None

    def test_on_postgresql_the_claim_reads_the_run_and_its_owner_as_a_query_would(self, operator, demo_capabilities):
        if connection.vendor != "postgresql":
            pytest.skip("PostgreSQL only: SQLite claims, then reads the run")
        run = start(operator)
        Run.objects.filter(pk=run.pk).update(cancel_requested_at=run.created_at, labels={"team": "ops", "n": [1, 2]})
        with CaptureQueriesContext(connection) as queries:
            lease = leases.claim(run.pk, "w1")
        assert len(queries) == 1
        expected = Run.objects.select_related("owner").get(pk=run.pk)
        claimed = lease.run
        for field in Run._meta.concrete_fields:
            assert getattr(claimed, field.attname) == getattr(expected, field.attname), field.name
        assert claimed.lease_token == lease.token and claimed.lease_owner == "w1"
        assert claimed.state == expected.state and isinstance(claimed.state, dict)
        assert claimed.created_at.tzinfo is not None and not claimed._state.adding
        with CaptureQueriesContext(connection) as queries:
            assert claimed.owner == operator and claimed.owner.username == operator.username
            assert claimed.owner.has_perm("runs.start_run") == operator.has_perm("runs.start_run")
        assert not any("runs_run" in q["sql"] for q in queries)
        assert leases.claim(run.pk, "w2") is None  # held: no row, no run

    def test_a_call_left_in_flight_is_seen_by_the_next_claim(self, operator, demo_capabilities):
        run = start(operator)
        engine.run_advance(run_id=run.pk, worker="w1")
        step = Step.objects.filter(run=run).first()
        attempt = Attempt.objects.get(run=run)
        Attempt.objects.create(run=run, step=step, uid="f" * 32, number=2, capability_name="search_documents",
                               signature="", signature_hash="", started_at=attempt.started_at,
                               ended_at=attempt.started_at, latency_s=0, status="terminal",
                               error_code="outcome_unknown", side_effect_status="unknown", in_flight=True,
                               trace_id="t", span_id="s")
        Run.objects.filter(pk=run.pk).update(status="running", stop_reason="", finished_at=None)
        lease = leases.claim(run.pk, "w2")
        assert lease.in_flight is True

    def test_a_slice_that_finishes_the_run_lets_go_of_its_lease_in_the_finishing_write(
            self, operator, demo_capabilities, monkeypatch):
        def no_release(lease):
            raise AssertionError("the finishing pass already let go of the lease")

        monkeypatch.setattr(engine, "release", no_release)
        run = start(operator)
        assert engine.run_advance(run_id=run.pk, worker="w1") is None
        run.refresh_from_db()
        assert run.status == "completed" and run.lease_owner == "" and run.lease_expires_at is None

    def test_the_plan_s_steps_link_the_versions_the_slice_read(self, operator, demo_capabilities):
        run = start(operator)
        engine.run_advance(run_id=run.pk, worker="w1")
        step = Step.objects.get(run=run)
        assert step.capability_version_id == Capability.objects.get(name="search_documents").current_version_id


@pytest.mark.django_db
def test_the_registry_s_secret_names_are_read_once_per_version(demo_capabilities):
    with CaptureQueriesContext(connection) as first:
        egress.server_redactor("v1")
    with CaptureQueriesContext(connection) as again:
        egress.server_redactor("v1")
    with CaptureQueriesContext(connection) as moved:
        egress.server_redactor("v2")
    assert len(first) == 2 and len(again) == 0 and len(moved) == 2


@pytest.fixture
def two_projects_one_name(db, roles, registry_admin, settings):
    """The default project and another, each with its own `probe_refund`: the default's needs no approval
    and calls one host; the other's needs an approval and calls another host with a secret header.
    Registered in that order, so the registry's version is the same for both afterwards."""
    from django.contrib.auth.models import User

    from capabilities.policy import capability_create
    from core.models import Project
    from core.project_access import grant_role
    from core.projects import project_scope

    settings.AGENTOPS_HTTP_ALLOWED_HOSTS = ["a.example.com", "b.example.com"]
    other = Project.objects.create(slug="other", name="Other team")
    grant_role(registry_admin, "registry admin", other)
    admin = User.objects.get(pk=registry_admin.pk)
    schema = {"type": "object"}
    capability_create(user=admin, name="probe_refund", kind="http", config={"url": "https://a.example.com/refund"},
                      policy={"description": "default's", "schema": schema, "side_effect": "write"})
    with project_scope(other):
        capability_create(user=admin, name="probe_refund", kind="http",
                          config={"url": "https://b.example.com/refund", "secret_headers": {"X-Key": "OTHER_TEAM_KEY"}},
                          policy={"description": "other's", "schema": schema, "side_effect": "write",
                                  "requires_approval": True})
    return other


@pytest.mark.django_db
def test_each_project_s_runs_see_its_own_capability_of_a_shared_name_at_one_version(two_projects_one_name):
    """Capability names are unique within a project only: one process's registry specs at a version are
    kept per project, or the first project to read `probe_refund` hands its endpoint, approval and
    side-effect class to every other project's runs (and its tool list to their planners)."""
    from core.projects import project_scope

    other = two_projects_one_name
    default = Capability._base_manager.exclude(project=other).get(name="probe_refund").project_id
    version = Capability._base_manager.order_by("-updated_at").values_list("updated_at", flat=True).first()
    read = []
    for project in (default, other.pk, default):
        with project_scope(project):
            registry = DjangoRegistry()
            registry.observe_version(version)
            spec = registry.get("probe_refund")
            listed = [s.description for s in registry.visible(_Everything()) if s.name == "probe_refund"]
        read.append((spec.description, spec.requires_approval, listed))
    assert read == [("default's", False, ["default's"]), ("other's", True, ["other's"]),
                    ("default's", False, ["default's"])]


class _Everything:
    def permits(self, permission):
        return True


@pytest.mark.django_db
def test_the_server_redacts_the_secrets_every_project_s_capabilities_read(two_projects_one_name, monkeypatch):
    """Read in the default project first, at a version: the other project's secret variable is redacted too."""
    from core.projects import project_scope

    monkeypatch.setenv("OTHER_TEAM_KEY", "other-team-key-7f3c9a")
    default = Capability._base_manager.exclude(project=two_projects_one_name).get(name="probe_refund").project_id
    with project_scope(default):
        redact = egress.server_redactor("one version")
    assert "other-team-key-7f3c9a" not in redact("upstream said: bad key other-team-key-7f3c9a")


def _first_pass(run, lease):
    """The run's first pass (its plan), as a worker's slice makes it, and the writer it goes through."""
    from runs.worker.adapters import build_controller

    run = Run.objects.select_related("owner").get(pk=run.pk)
    registry = DjangoRegistry()
    registry.observe_version(lease.registry_version)
    writer = PassWriter(run, lease, version_of=registry.version_id)
    state = checkpoint.load(run)
    writer.previous = state
    return build_controller(run, writer, registry).advance(state), writer


@pytest.mark.django_db
class TestTheFirstPlanInOneStatement:
    @pytest.fixture(autouse=True)
    def postgres_only(self):
        if connection.vendor != "postgresql":
            pytest.skip("PostgreSQL only: SQLite writes the pass in a transaction")

    def two_step_run(self, owner):
        steps = [{"id": "a", "capability": "search_documents", "arguments": {"q": "travel"}},
                 {"id": "b", "capability": "search_documents", "arguments": {"q": "expenses"}}]
        return services.run_start(owner=owner, goal="Find two policies", budgets={"deadline_s": 60},
                                  completion={"capability": "search_documents", "path": "documents.0.id", "exists": True},
                                  planner="scripted", planner_config={"plans": [steps]})

    def test_the_fenced_update_the_revision_and_its_steps_are_one_statement(self, operator, demo_capabilities):
        run = self.two_step_run(operator)
        lease = leases.claim(run.pk, "w1")
        transition, writer = _first_pass(run, lease)
        with CaptureQueriesContext(connection) as queries:
            writer.commit(transition)
        assert len(queries) == 1, [q["sql"][:80] for q in queries]
        revision = run.plan_revisions.get()
        steps = list(Step.objects.filter(run=run).order_by("index"))
        assert revision.number == 1 and revision.accepted and revision.reason_code == "initial"
        assert [(s.key, s.status, s.revision_id) for s in steps] == [("a", "pending", revision.pk),
                                                                      ("b", "pending", revision.pk)]
        version = Capability.objects.get(name="search_documents").current_version_id
        assert all(s.capability_version_id == version for s in steps)
        # The writer knows the steps it wrote: the next pass reads none of them.
        assert writer._steps == {(1, "a"): (steps[0].pk, version), (1, "b"): (steps[1].pk, version)}

    def test_a_plan_of_the_most_steps_written_so_is_one_statement_too(self, operator, demo_capabilities):
        from runs.worker.persistence import ONE_STATEMENT_PLAN_STEPS

        steps = [{"id": f"s{i}", "capability": "search_documents", "arguments": {"q": f"travel {i}"}}
                 for i in range(ONE_STATEMENT_PLAN_STEPS)]
        run = services.run_start(owner=operator, goal="A long plan", completion={
            "capability": "search_documents", "path": "documents.0.id", "exists": True},
            budgets={"deadline_s": 60, "max_plan_steps": len(steps)}, planner="scripted",
            planner_config={"plans": [steps]})
        transition, writer = _first_pass(run, leases.claim(run.pk, "w1"))
        with CaptureQueriesContext(connection) as queries:
            writer.commit(transition)
        assert len(queries) == 1
        assert list(Step.objects.filter(run=run).order_by("index").values_list("key", flat=True)) == [
            s["id"] for s in steps]

    def test_the_run_goes_on_from_a_plan_written_so(self, operator, demo_capabilities):
        run = self.two_step_run(operator)
        engine.run_advance(run_id=run.pk, worker="w1")
        run.refresh_from_db()
        assert run.status == "completed" and run.tool_calls == 1  # the first step's result completes it
        assert list(Step.objects.filter(run=run).order_by("index").values_list("status", flat=True)) == [
            "succeeded", "skipped"]

    def test_a_lost_lease_writes_no_revision_and_no_step(self, operator, demo_capabilities):
        from runtime.intents import LeaseLost

        run = self.two_step_run(operator)
        lease = leases.claim(run.pk, "w1")
        transition, writer = _first_pass(run, lease)
        Run.objects.filter(pk=run.pk).update(lease_token=lease.token + 1)  # another worker took it over
        with pytest.raises(LeaseLost):
            writer.commit(transition)
        assert not run.plan_revisions.exists() and not Step.objects.filter(run=run).exists()


@pytest.mark.django_db
def test_a_plan_of_more_steps_than_one_statement_may_bind_is_written_in_batches(operator, demo_capabilities):
    """On PostgreSQL 5,100 steps of 13 columns are 66,300 parameters, over the protocol's 65,535: the
    run was left retrying the plan's INSERT as if the database were down. SQLite binds 999."""
    from runs.worker.sql import Columns, max_params

    count = max_params() // len(Columns.of(Step).columns) + 60
    steps = [{"id": f"s{i}", "capability": "search_documents", "arguments": {"q": f"travel {i}"}} for i in range(count)]
    run = services.run_start(owner=operator, goal="A very long plan", budgets={"deadline_s": 60, "max_plan_steps": count},
                             completion={"capability": "search_documents", "path": "documents.0.id", "exists": True},
                             planner="scripted", planner_config={"plans": [steps]})
    engine.run_advance(run_id=run.pk, worker="w1")
    run.refresh_from_db()
    assert run.status == "completed" and run.tool_calls == 1
    written = Step.objects.filter(run=run)
    assert written.count() == count and written.filter(status="succeeded").get().key == "s0"
    assert sorted(written.values_list("index", flat=True)) == list(range(count))
