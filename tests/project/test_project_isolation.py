"""Two projects, every role, every page, API endpoint and gateway call: nothing of one project is read,
counted or changed from the other.

Project "zebra" holds a run awaiting approval, a finished run, an HTTP capability, a notification channel
and rule, an agent with a token, an evaluation, a saved view and an API token, each named with the marker
"quagga" (the capability's description: a URL carries its name). People of the default project (every
role, and a superuser acting there) ask for every route, with zebra's ids where a route takes one, and
search for zebra's words: no answer may carry the marker, and no write may change a zebra object.
"""
from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from core.models import AuditEvent, Project
from core.project_access import grant_role
from core.projects import project_of, project_scope
from core.roles import ROLE_PERMISSIONS
from core.tokens import token_create
from review.models import Annotation, QueueItem, QueueReview, ReviewQueue, RootCauseCategory, Score, ScoreConfig
from runs import services
from runs.models import Approval, Run
from runs.worker import engine
from tests.conftest import url_patterns, zebra_member

pytestmark = pytest.mark.django_db

MARKER = "quagga"
# Routes that sign in or out, or a public signed link, or the project switcher itself (tested below).
SKIP = {"login", "logout", "oidc-start", "oidc-callback", "favicon", "healthz", "project-switch",
        "email-decide", "slack-interactions", "slack-events", "slack-commands"}
FOUND = {"capability": "search_documents", "path": "documents.0.id", "exists": True}
SEARCH = [[{"capability": "search_documents", "arguments": {"q": "travel"}}]]


def _finish(run):
    for _ in range(20):
        engine.run_advance(run_id=run.pk, worker="isolation")
        run.refresh_from_db()
        if run.is_finished:
            return run
    raise AssertionError(f"run {run.pk} did not finish")


@pytest.fixture
def zebra(roles, operator, settings):
    """The other project, its people and one of everything, named with the marker."""
    from capabilities.kinds.python.sync import python_capabilities_sync
    from capabilities.policy import capability_create
    from evaluation.services import evaluation_create, evaluation_suites_sync
    from gateway import services as gateway_services
    from notifications import services as notify
    from review import datasets, queues
    from review import services as review
    from runs.search import saved_view_save

    settings.AGENTOPS_HTTP_ALLOWED_HOSTS = ["api.example.com", "hooks.example.com"]
    project, bert = zebra_member("operator", "lead operator", "registry admin", "auditor", "reviewer")
    with project_scope(project):
        python_capabilities_sync()
        waiting = services.run_start(owner=bert, goal=f"{MARKER} needs approval ZEBRA", planner="scripted",
                                     planner_config={"plans": SEARCH}, completion=FOUND, require_plan_approval=True,
                                     labels={"team": "stripes"})
        engine.run_advance(run_id=waiting.pk, worker="isolation")
        done = _finish(services.run_start(owner=bert, goal=f"{MARKER} finished ZEBRA", planner="scripted",
                                          planner_config={"plans": SEARCH}, completion=FOUND,
                                          labels={"team": "stripes"}))
        capability = capability_create(user=bert, name="striped_lookup", kind="http",
                                       policy={"description": f"{MARKER} lookup", "schema": {"type": "object"}},
                                       config={"url": "https://api.example.com/lookup", "method": "POST"})
        channel = notify.channel_save(user=bert, name=f"{MARKER}-channel", url="json://hooks.example.com/hook")
        rule = notify.rule_save(user=bert, name=f"{MARKER}-rule", event="run_stopped", channel_ids=[channel.pk])
        agent = gateway_services.agent_save(user=bert, name=f"{MARKER}-agent", owner=bert,
                                            capabilities=["search_documents"])
        agent_token, _ = gateway_services.agent_token_issue(user=bert, agent=agent, name=f"{MARKER}-token")
        evaluation_suites_sync()
        # A suite of its own, made from its finished run (its versions carry the run's goal).
        suite = datasets.suite_add_runs(user=bert, suite=f"{MARKER}-suite", run_ids=[done.pk], create=True).suite
        evaluation = evaluation_create(user=bert, suite_id=suite.pk, label=f"{MARKER}-baseline")
        view = saved_view_save(user=bert, name=f"{MARKER}-view", query="status=completed")
        api_token, api_key = token_create(user=bert, name=f"{MARKER}-api")
        approval = Approval.objects.get(run=waiting)
        attempt = done.attempts.first()
        config = review.score_config_save(user=bert, name=f"{MARKER}_quality", kind="numeric", min_value=0,
                                          max_value=5, description=f"{MARKER} quality")
        score, _ = review.score_set(user=bert, run=done, config=config.pk, value=4, comment=f"{MARKER} good")
        comment = review.annotation_add(user=bert, run=done, body=f"{MARKER} looked at this")
        category = RootCauseCategory.objects.order_by("pk").first()   # a new project's starting list
        review.incident_save(user=bert, run=done, summary=f"{MARKER} incident", root_cause=category.name)
        queue, _ = queues.queue_save(user=bert, name=f"{MARKER} queue", filter_query="", score_configs=[config.name],
                                     description=f"{MARKER} review these")
        item = queues.queue_next(user=bert, queue=queue)
    return SimpleNamespace(project=project, bert=bert, run=waiting, done=done, approval=approval, attempt=attempt,
                           capability=capability, channel=channel, rule=rule, agent=agent, agent_token=agent_token,
                           suite=suite, evaluation=evaluation, view=view, api_token=api_token, api_key=api_key,
                           config=config, score=score, comment=comment,
                           category=category, queue=queue, item=item)


@pytest.fixture
def people(roles, zebra):
    """One person per role in the default project only, and a superuser acting there."""
    people = {}
    for role in ROLE_PERMISSIONS:
        user = User.objects.create_user("a-" + role.replace(" ", "-"), password="pw")
        grant_role(user, role)
        people[role] = user
    people["superuser"] = User.objects.create_superuser("root", password="pw")
    people["no project"] = User.objects.create_user("nobody-anywhere", password="pw")
    return people


def _route_ids(z) -> dict[str, object]:
    return {"run_id": z.run.pk, "approval_id": z.approval.pk, "name": z.capability.name, "uid": z.attempt.uid,
            "server_id": 999_999, "evaluation_id": z.evaluation.pk, "suite_id": z.suite.pk, "agent_id": z.agent.pk,
            "channel_id": z.channel.pk, "rule_id": z.rule.pk, "view_id": z.view.pk, "token_id": z.agent_token.pk,
            "job_id": 999_999, "token": "not-a-link", "annotation_id": z.comment.pk, "score_id": z.score.pk,
            "config_id": z.config.pk, "category_id": z.category.pk,
            "queue_id": z.queue.pk, "item_id": z.item.pk, "slug": z.project.slug, "pk": z.run.pk,
            "id": z.run.pk}


def _urls(z):
    for route, name in url_patterns():
        if name in SKIP or "(?P<format>" in route or route.startswith("static"):
            continue
        # An agent's token under an agent's routes, a person's API token under theirs.
        ids = {**_route_ids(z), **({} if "agent" in route else {"token_id": z.api_token.pk})}
        path = re.sub(r"<(?:\w+:)?(\w+)>", lambda m, ids=ids: str(ids[m.group(1)]), route)
        yield name, "/" + path.lstrip("^").rstrip("$"), "<" in route


# What a superuser does to any project, being the instance's administrator (tests/project/test_project_limits.py).
INSTANCE_ADMIN = {"project-limits", "api-project-limits"}
SEARCHES = ["/runs/?q=ZEBRA", "/api/runs/?q=ZEBRA", "/runs/calls/?q=ZEBRA", "/api/calls/?q=ZEBRA",
            "/runs/?label=team:stripes", "/api/runs/?label=team:stripes", "/api/audit/?target_type=run",
            "/runs/failures/", "/api/failure-groups/", "/usage/", "/api/usage/?group=label", "/runs/dashboard/",
            "/runs/approvals/", "/api/approvals/", "/runs/compare/?a={done}&b={run}",
            "/api/runs/compare/?a={done}&b={run}"]


def _client(user):
    api = APIClient()
    api.force_login(user)
    return api


def test_no_page_or_endpoint_shows_another_projects_objects(zebra, people):
    checked = 0
    for who, user in people.items():
        api = _client(user)
        urls = [(name, url) for name, url, _ in _urls(zebra)]
        urls += [("search", url.format(done=zebra.done.pk, run=zebra.run.pk)) for url in SEARCHES]
        for _name, url in urls:
            response = api.get(url)
            body = b"".join(response.streaming_content) if response.streaming else response.content
            assert response.status_code < 500, (who, url, response.status_code)
            assert MARKER.encode() not in body.lower(), (who, url, response.status_code)
            checked += 1
    assert checked > 500


def test_no_write_reaches_another_projects_objects(zebra, people):
    def state():
        with project_scope(zebra.project):
            return (list(Run.objects.order_by("pk").values_list("pk", "status", "cancel_requested_at", "labels")),
                    list(Approval.objects.values_list("pk", "state")),
                    [(c.pk, c.enabled, c.current_version_id) for c in type(zebra.capability).objects.all()],
                    sorted(type(zebra.rule).objects.values_list("pk", "name", "enabled")),
                    sorted(type(zebra.channel).objects.values_list("pk", "name", "enabled")),
                    sorted(type(zebra.agent).objects.values_list("pk", "enabled", "name")),
                    sorted(type(zebra.agent_token).objects.values_list("pk", "revoked_at")),
                    list(type(zebra.view).objects.values_list("pk", "name")),
                    list(Score.objects.values_list("pk", "number", "category", "comment")),
                    list(Annotation.objects.values_list("pk", "body")),
                    list(ScoreConfig.objects.values_list("pk", "name", "enabled", "description")),
                    list(RootCauseCategory.objects.values_list("pk", "name", "enabled")),
                    list(ReviewQueue.objects.values_list("pk", "name", "filter_query", "active")),
                    list(QueueItem.objects.values_list("pk", "taken", "done_count", "done_at")),
                    list(QueueReview.objects.values_list("pk", "state", "reviewer_id")),
                    list(type(zebra.api_token).objects.filter(project=zebra.project).values_list("pk", "revoked_at")),
                    AuditEvent.objects.count())

    before = state()
    for who, user in people.items():
        api = _client(user)
        for name, url, takes_id in _urls(zebra):
            if not takes_id:
                continue   # a route without an object acts in the person's own project
            if who == "superuser" and name in INSTANCE_ADMIN:
                continue   # a superuser sets any project's limits: the instance's administrator
            for body in ({}, {"decision": "approve", "expected_hash": "x", "enabled": "false", "name": "x",
                              "labels": {"x": "y"}, "add": {"x": "y"}}):
                response = api.post(url, body, format="json")
                # A page answers a refused form with a redirect and a message: what counts is the state.
                assert response.status_code in (302, 400, 403, 404, 405), (who, url, response.status_code)
    assert state() == before


def test_counts_and_lists_hold_only_the_projects_own_runs(zebra, people, operator):
    with project_scope(None):
        assert Run.objects.filter(project=zebra.project).count() == 2
    mine = services.run_start(owner=operator, goal="Mine", planner="scripted", planner_config={"plans": SEARCH},
                              completion=FOUND)
    body = _client(people["viewer"]).get("/api/runs/").json()
    assert [r["id"] for r in body["results"]] == [mine.pk] and body["count"] == 1
    assert _client(people["viewer"]).get("/api/approvals/").json()["results"] == []
    page = _client(people["viewer"]).get("/runs/dashboard/").content.decode()
    assert "Mine" in page or ">1<" in page


def test_an_api_token_acts_in_its_own_project_only(zebra, operator):
    mine_token, mine_key = token_create(user=operator, name="mine")
    assert mine_token.project.slug == "default"
    theirs = APIClient(HTTP_AUTHORIZATION=f"Token {zebra.api_key}")
    ours = APIClient(HTTP_AUTHORIZATION=f"Token {mine_key}")
    assert theirs.get(f"/api/runs/{zebra.run.pk}/").status_code == 200
    assert ours.get(f"/api/runs/{zebra.run.pk}/").status_code == 404
    assert MARKER not in ours.get("/api/runs/").content.decode()
    # The token's own project, never another: not by naming one, not by minting through a token.
    refused = ours.post("/api/tokens/", {"name": "sneak", "project": "zebra"}, format="json")
    assert refused.status_code == 403
    assert theirs.post("/api/tokens/", {"name": "child"}, format="json").json()["project"] == "zebra"


def test_the_switcher_moves_a_person_only_into_projects_they_hold(zebra, people, client):
    client.force_login(zebra.bert)
    default = Project.objects.get(slug="default")
    client.post("/projects/switch/", {"project": default.pk, "next": "/runs/"})
    assert MARKER in client.get("/runs/").content.decode()   # still in zebra: bert holds no role in default
    grant_role(zebra.bert, "viewer")
    client.post("/projects/switch/", {"project": default.pk, "next": "/runs/"})
    page = client.get("/runs/").content.decode()
    assert MARKER not in page and 'id="project-switcher"' in page and "Zebra team" in page
    client.post("/projects/switch/", {"project": zebra.project.pk})
    assert MARKER in client.get("/runs/").content.decode()


def test_a_person_without_a_project_sees_nothing_and_may_do_nothing(zebra, people):
    api = _client(people["no project"])
    assert api.get("/api/runs/").status_code == 403
    assert api.get("/runs/").status_code == 403
    assert "No project" in api.get("/account/tokens/").content.decode()


def test_rows_made_in_bulk_land_in_the_project_in_scope_and_records_know_theirs(zebra, operator):
    # bulk_create sends no pre_save: the scoped manager fills the project itself, as save() would.
    made = Run.objects.bulk_create([Run(goal=f"bulk {i}", owner=operator, planner="scripted", completion=FOUND,
                                        budgets={}, trace_id=f"{i:032x}") for i in range(2)])
    assert {r.project_id for r in made} == {Project.objects.get(slug="default").pk}
    # A run's record belongs to its run's project (core.projects.project_of: the audit trail uses it).
    with project_scope(None):
        approval = Approval.objects.filter(run__project=zebra.project).first()
    assert project_of(approval) == zebra.project.pk and project_of(made[0]) == made[0].project_id
