"""Notification rules across projects: a run's finish is judged by its own project's rules, over its own usage.

A usage burn rule (notifications.burn) is looked at when a run finishes (runs.signals.run_finished). A
worker's pass finishes a run in its project's scope, but the sweeps (a deadline passed while a run awaited
an approval, an approval expired) finish runs in no project's scope: their finish must still reach only the
run's project's rules, each summing that project's usage alone. Project "zebra" has the same label, a rule
and usage of its own.
"""
from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from core.models import Project
from core.project_access import grant_role
from core.projects import project_scope
from notifications import burn
from notifications import services as notify
from notifications.models import Delivery
from runs.dashboard import usage
from runs.models import Run, RunLabel
from runs.worker import sweeps
from tests.conftest import zebra_member

pytestmark = pytest.mark.django_db

BURN = {"measure": "tokens", "limit": 1000, "window_hours": 24, "per": "label", "label_key": "team"}


def _run(owner, *, tokens: int, **fields) -> Run:
    run = Run.objects.create(goal="Refund the order", completion={"capability": "issue_refund", "path": "n",
                                                                  "exists": True},
                             budgets={"deadline_s": 60}, planner="scripted", owner=owner, tokens=tokens,
                             labels={"team": "payments"}, started_at=timezone.now(),
                             trace_id=uuid.uuid4().hex, **fields)
    RunLabel.objects.create(run=run, key="team", value="payments")
    return run


def _overdue(owner, *, tokens: int) -> Run:
    """A run awaiting an approval past its deadline, which no worker holds: the sweep stops it."""
    return _run(owner, tokens=tokens, status="awaiting_approval", deadline_at=timezone.now() - timedelta(seconds=5))


def _swept(capture) -> None:
    with project_scope(None), capture(execute=True):   # the scheduler's task: in no project's scope
        assert sweeps.sweep_overdue_runs() >= 1


@pytest.fixture
def zebra(roles, settings, monkeypatch):
    settings.AGENTOPS_HTTP_ALLOWED_HOSTS = ["hooks.example.com"]
    monkeypatch.setattr(burn.send_due, "delay", lambda: None)   # written is what counts; not sent here
    project, bert = zebra_member("operator", "lead operator")
    with project_scope(project):
        channel = notify.channel_save(user=bert, name="zebra-hook", url="json://hooks.example.com/zebra")
        rule = notify.rule_save(user=bert, name="zebra burn", event="usage_burn", channel_ids=[channel.pk],
                                params=BURN)
    return project, bert, rule


def _deliveries() -> list[tuple[int, str]]:
    with project_scope(None):
        return list(Delivery.objects.values_list("project_id", "rule__name"))


def test_a_swept_run_never_fires_another_projects_burn_rule(zebra, operator, django_capture_on_commit_callbacks):
    project, _bert, _rule = zebra
    _overdue(operator, tokens=5000)   # the default project's team=payments, over zebra's limit alone
    _swept(django_capture_on_commit_callbacks)
    assert _deliveries() == []


def test_a_swept_run_fires_its_projects_rule_over_its_projects_usage_alone(zebra, operator, lead_operator_channel,
                                                                          django_capture_on_commit_callbacks):
    project, bert, _rule = zebra
    with project_scope(project):   # zebra's team=payments spent 900 tokens today
        done = _run(bert, tokens=900, status="completed", stop_reason="completed", finished_at=timezone.now())
        usage.record_run_finished(run_id=done.pk)
    notify.rule_save(user=lead_operator_channel.user, name="our burn", event="usage_burn",
                     channel_ids=[lead_operator_channel.channel.pk], params=BURN)
    _overdue(operator, tokens=600)   # ours: 600 of our 1000; with zebra's 900 it would be over
    _swept(django_capture_on_commit_callbacks)
    assert _deliveries() == []
    _overdue(operator, tokens=500)   # ours now 1100: over our limit, and told to our channel only
    _swept(django_capture_on_commit_callbacks)
    assert _deliveries() == [(Project.objects.get(slug="default").pk, "our burn")]


@pytest.fixture
def lead_operator_channel(roles, settings):
    from types import SimpleNamespace

    lead = User.objects.create_user("lena", password="pw-lena")
    grant_role(lead, "lead operator")
    grant_role(lead, "operator")
    lead = User.objects.get(pk=lead.pk)
    channel = notify.channel_save(user=lead, name="our-hook", url="json://hooks.example.com/ours")
    return SimpleNamespace(user=lead, channel=channel)


def test_every_app_hears_of_a_swept_run_in_the_run_s_project(zebra, operator, django_capture_on_commit_callbacks):
    """runs.signals.run_finished is sent in the run's project, whoever finished it: a receiver reads
    through the scoped managers without a scope of its own."""
    from core.projects import active_project_id
    from runs.signals import run_finished

    project, bert, _rule = zebra
    heard = []

    def receiver(sender, *, run_id, **kwargs):
        heard.append((run_id, active_project_id()))

    run_finished.connect(receiver, dispatch_uid="test.heard")
    try:
        with project_scope(project):
            theirs = _overdue(bert, tokens=1)
        mine = _overdue(operator, tokens=1)
        _swept(django_capture_on_commit_callbacks)
    finally:
        run_finished.disconnect(dispatch_uid="test.heard")
    assert sorted(heard) == sorted([(mine.pk, mine.project_id), (theirs.pk, project.pk)])
