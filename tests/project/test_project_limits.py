"""A project's limits: per-day quotas and default budgets, set by a superuser (page and API), audited."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from core.models import AuditEvent, Project
from core.project_access import grant_role
from runs import services

pytestmark = pytest.mark.django_db
FOUND = {"capability": "search_documents", "path": "documents.0.id", "exists": True}


@pytest.fixture
def root(roles):
    return User.objects.create_superuser("root", password="pw-root")


def test_a_superuser_sets_the_limits_and_it_is_audited(api_for, root):
    body = {"runs_per_day": 100, "tokens_per_day": 50_000, "cost_per_day": 2.5,
            "default_budgets": {"max_tool_calls": 7, "deadline_s": 120}}
    response = api_for(root).put("/api/projects/default/limits/", body, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["runs_per_day"] == 100 and response.json()["default_budgets"]["max_tool_calls"] == 7
    project = Project.objects.get(slug="default")
    assert (project.quota_runs_per_day, project.quota_tokens_per_day, project.quota_cost_per_day) == (100, 50_000, 2.5)
    event = AuditEvent.objects.get(action="project.limits_saved")
    assert event.actor == root and event.details["after"]["quota_runs_per_day"] == 100
    cleared = api_for(root).put("/api/projects/default/limits/", {"runs_per_day": None}, format="json").json()
    assert cleared["runs_per_day"] is None and cleared["default_budgets"] == {}


@pytest.mark.parametrize("body,field", [
    ({"runs_per_day": -1}, "runs_per_day"), ({"runs_per_day": 1.5}, "runs_per_day"),
    ({"tokens_per_day": "many"}, "tokens_per_day"), ({"cost_per_day": True}, "cost_per_day"),
    ({"cost_per_day": 1e300}, "cost_per_day"), ({"default_budgets": {"max_tool_calls": "x"}}, "budgets.max_tool_calls"),
    ({"default_budgets": {"warp_drive": 1}}, "budgets"), ({"default_budgets": []}, "budgets"),
])
def test_bad_limits_are_a_400_naming_the_field_and_change_nothing(api_for, root, body, field):
    response = api_for(root).put("/api/projects/default/limits/", body, format="json")
    assert response.status_code == 400 and field in response.json()["error"]["fields"], response.content
    assert not AuditEvent.objects.filter(action="project.limits_saved").exists()


def test_only_a_superuser_may_and_others_learn_nothing(api_for, client_for, operator, viewer):
    grant_role(operator, "lead operator")
    for user in (operator, viewer):
        assert api_for(user).put("/api/projects/default/limits/", {"runs_per_day": 1}, format="json").status_code == 404
        assert client_for(user).get("/projects/default/limits/").status_code == 404
    assert Project.objects.get(slug="default").quota_runs_per_day is None


def test_the_page_saves_them(client_for, root):
    client = client_for(root)
    assert "Runs per day" in client.get("/projects/default/limits/").content.decode()
    response = client.post("/projects/default/limits/", {"runs_per_day": "3", "tokens_per_day": "", "cost_per_day": "",
                                                         "default_budgets": '{"max_retries": 2}'}, follow=True)
    assert "Limits of Default saved." in response.content.decode()
    project = Project.objects.get(slug="default")
    assert project.quota_runs_per_day == 3 and project.quota_tokens_per_day is None
    assert project.default_budgets == {"max_retries": 2}
    bad = client.post("/projects/default/limits/", {"runs_per_day": "three", "default_budgets": "{}"})
    assert bad.status_code == 400 and "whole numbers" in bad.content.decode()


def test_a_run_starts_with_the_projects_default_budgets_under_its_own(operator):
    Project.objects.filter(slug="default").update(default_budgets={"max_tool_calls": 7, "max_retries": 1})
    run = services.run_start(owner=operator, goal="g", completion=FOUND, budgets={"max_retries": 4})
    assert run.budgets["max_tool_calls"] == 7 and run.budgets["max_retries"] == 4
    assert run.budgets["max_iterations"] == 50   # the runtime's default where neither names one


def test_the_project_list_says_where_one_acts_and_with_which_roles(api_for, operator):
    zebra = Project.objects.create(slug="zebra", name="Zebra")
    grant_role(operator, "viewer", zebra)
    rows = {row["slug"]: row for row in api_for(operator).get("/api/projects/").json()}
    assert rows["default"]["roles"] == ["operator"] and rows["default"]["acting"] is True
    assert rows["zebra"]["roles"] == ["viewer"] and rows["zebra"]["acting"] is False


def test_a_new_project_starts_with_the_codes_capabilities_root_causes_and_builtin_scores(roles):
    from capabilities.models import Capability
    from core.projects import project_scope
    from review.models import RootCauseCategory, ScoreConfig

    fresh = Project.objects.create(slug="fresh", name="Fresh")
    with project_scope(fresh):
        assert {"search_documents", "create_ticket"} <= set(Capability.objects.values_list("name", flat=True))
        assert RootCauseCategory.objects.count() == 5
        assert "completion_verified" in set(ScoreConfig.objects.filter(builtin=True).values_list("name", flat=True))
