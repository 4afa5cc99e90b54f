"""Approval decisions that arrive from outside a project (an e-mailed link, a click in Slack) across projects.

Both decide in the approval's project with the roles the person holds there (core.projects): a link or a
click for the default project's request, by someone who holds a role only in project "zebra" (say a link
mailed while they held one here, since revoked), decides nothing, whichever project they act in.
"""
from __future__ import annotations

import json

import pytest

from capabilities.kinds.python.sync import python_capabilities_sync
from core.projects import project_scope
from notifications import email_links
from notifications.models import SlackLink
from notifications.slack import blocks, interactions
from runs import services
from runs.models import Approval
from runs.worker import engine
from tests.conftest import zebra_member

pytestmark = pytest.mark.django_db

FOUND = {"capability": "search_documents", "path": "documents.0.id", "exists": True}


@pytest.fixture
def ours_waiting(operator):
    python_capabilities_sync()
    run = services.run_start(owner=operator, goal="Ours awaits its plan's approval", planner="scripted",
                             planner_config={"plans": [[{"capability": "search_documents", "arguments": {"q": "x"}}]]},
                             completion=FOUND, require_plan_approval=True)
    engine.run_advance(run_id=run.pk, worker="probe")
    return Approval.objects.get(run=run, state="pending")


@pytest.fixture
def zebra_operator(roles):
    """An operator of zebra only."""
    return zebra_member("operator", email="bert@example.com")[1]


def _state(approval) -> str:
    with project_scope(None):
        return Approval.objects.get(pk=approval.pk).state


def test_an_emailed_link_decides_nothing_for_someone_without_a_role_in_the_approvals_project(
        ours_waiting, zebra_operator, client, settings):
    settings.AGENTOPS_BASE_URL = "http://testserver"
    links = email_links.issue(approval=ours_waiting, user=zebra_operator)
    client.force_login(zebra_operator)   # acting in zebra, the one project bert holds
    page = client.get(links["approve"].removeprefix("http://testserver"))
    assert page.status_code == 403
    response = client.post(links["approve"].removeprefix("http://testserver").split("?")[0],
                           {"decision": "approve"})
    assert response.status_code == 403 and _state(ours_waiting) == "pending"


def test_a_slack_click_decides_nothing_for_someone_without_a_role_in_the_approvals_project(
        ours_waiting, zebra_operator):
    SlackLink.objects.create(user=zebra_operator, team_id="T1", slack_user_id="U1")
    value = json.dumps({"a": ours_waiting.pk, "h": ours_waiting.plan_hash, "r": ours_waiting.revision.number})
    payload = {"type": "block_actions", "team": {"id": "T1"}, "user": {"id": "U1"}, "channel": {"id": "C1"},
               "container": {"message_ts": "1.1"}, "actions": [{"action_id": blocks.APPROVE, "value": value}]}
    with project_scope(None):   # the Slack endpoint's request: no person signed in, no project
        assert interactions.handle(payload) == interactions.NOT_ALLOWED
    assert _state(ours_waiting) == "pending"
