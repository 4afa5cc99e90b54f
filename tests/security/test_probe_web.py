"""Form posts to the pages with hostile fields: a NUL character (PostgreSQL keeps none in text), deep
JSON, a number that is not one. A clear refusal, nothing written, on both stacks."""
from __future__ import annotations

from datetime import timedelta

import pytest

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin(db):
    from django.contrib.auth.models import User

    return User.objects.create_superuser("root", "root@example.com", "pw-root-long-enough")


@pytest.fixture
def web(admin, client):
    client.force_login(admin)
    return client


def _run(owner, **fields):
    from django.utils import timezone

    from runs.models import Run

    now = timezone.now()
    return Run.objects.create(goal="g", completion={"capability": "x", "path": "id", "exists": True},
                              budgets={"deadline_s": 600}, planner="scripted", owner=owner, started_at=now,
                              trace_id=f"{fields.pop('trace', 'w')}" * 32, **fields)


@pytest.fixture
def approval(admin):
    from django.utils import timezone

    from runs.models import Approval, PlanRevision, Step

    run = _run(admin, status="awaiting_approval")
    revision = PlanRevision.objects.create(run=run, number=1, accepted=True, reason_code="initial", steps=[])
    step = Step.objects.create(run=run, revision=revision, index=0, key="s1", capability_name="create_ticket",
                               arguments={"t": 1}, arguments_hash="h1", approval_state="pending")
    return Approval.objects.create(run=run, kind="step", revision=revision, step=step, capability_name="create_ticket",
                                   arguments={"t": 1}, arguments_hash="h1",
                                   expires_at=timezone.now() + timedelta(hours=1))


class TestDecisionComments:
    def test_the_inbox_refuses_a_nul_in_the_comment_and_the_request_stays_pending(self, web, approval):
        """Before: a 500 on PostgreSQL (the UPDATE failed); on SQLite the comment was kept as it was."""
        response = web.post(f"/runs/approvals/{approval.pk}/decide/",
                            {"decision": "approve", "comment": "a\x00b", "expected_hash": "h1"}, HTTP_HX_REQUEST="true")
        assert response.status_code == 400
        assert b"NUL" in response.content
        approval.refresh_from_db()
        assert approval.state == "pending"

    def test_an_email_link_refuses_a_nul_in_the_comment_and_stays_unused(self, web, admin, approval):
        from notifications import email_links
        from notifications.models import EmailDecisionLink

        url = email_links.issue(approval=approval, user=admin)["approve"].split("?")[0]
        response = web.post(url[url.index("/notifications/"):], {"decision": "approve", "comment": "a\x00b"})
        assert response.status_code == 400
        assert b"NUL" in response.content
        approval.refresh_from_db()
        assert approval.state == "pending"
        assert EmailDecisionLink.objects.get().used_at is None


class TestForkForm:
    @pytest.mark.parametrize("field", ["budgets", "planner_config"])
    def test_deep_json_is_refused_and_starts_nothing(self, web, admin, field):
        """Before: json.loads raised RecursionError (a 500); now the one JSON reader (core.jsonlimits)."""
        from runs.models import Run

        source = _run(admin, status="stopped", stop_reason="stalled", trace="f")
        response = web.post(f"/runs/{source.pk}/fork/", {field: "[" * 100_000 + "]" * 100_000}, follow=True)
        assert response.status_code == 200
        assert "nested more than" in response.content.decode()
        assert Run.objects.count() == 1


class TestAccountPages:
    @pytest.mark.parametrize("user", ["abc", "1\x00", "9" * 5000])
    def test_a_role_grant_for_a_user_that_is_not_a_number_names_nobody(self, web, user):
        """Before: int() raised ValueError (a 500)."""
        response = web.post("/roles/", {"user": user, "roles": ["viewer"]}, follow=True)
        assert response.status_code == 200
        assert "No active user" in response.content.decode()

    def test_a_project_name_with_a_nul_is_refused(self, web):
        from core.models import Project

        response = web.post("/projects/", {"slug": "nul", "name": "n\x00"}, follow=True)
        assert response.status_code == 200
        assert "NUL" in response.content.decode()
        assert not Project.objects.filter(slug="nul").exists()

    def test_a_saved_view_name_with_a_nul_is_refused(self, web, admin):
        from runs.models import SavedView

        response = web.post("/runs/views/save/", {"name": "v\x00", "query": "status=stopped"}, follow=True)
        assert response.status_code == 200
        assert "NUL character" in response.content.decode()
        assert not SavedView.objects.exists()
