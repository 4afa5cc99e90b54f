"""The audit log (core.audit_log): its filters and keyset pages, the page, the API and the exports,
who may read it, and that no secret in a row's details is ever shown."""
import csv
import io
import json
from datetime import timedelta

import pytest
from django.utils import timezone

from core import audit_log
from core.audit import audit
from core.models import AuditAction, AuditEvent
from core.pagination import InvalidCursor
from core.project_access import grant_role
from core.roles import AUDITOR, LEAD_OPERATOR, ROLE_PERMISSIONS, VIEW_AUDIT_LOG
from tests.conftest import _make_user


@pytest.fixture
def auditor(roles):
    return _make_user("audrey", AUDITOR)


@pytest.fixture
def lead(roles):
    return _make_user("lena", LEAD_OPERATOR)


def _row(actor, action, target, summary, *, ago=timedelta(0), details=None):
    event = audit(actor=actor, action=action, target=target, summary=summary, details=details)
    AuditEvent.objects.filter(pk=event.pk).update(created_at=timezone.now() - ago)
    return event


@pytest.fixture
def log(db, operator, viewer):
    """Seven rows, and only these: five by the operator an hour apart, one by the viewer, one by the system."""
    AuditEvent.objects.all().delete()  # the capability sync's, from migrate (rolled back after the test)
    rows = [_row(operator, AuditAction.TOKEN_CREATED, operator, f"API token t{n} created", ago=timedelta(hours=n))
            for n in range(5)]
    rows.append(_row(viewer, AuditAction.ROLE_GRANTED, operator, "Role viewer granted to otto",
                     ago=timedelta(days=2), details={"role": "viewer"}))
    rows.append(_row(None, AuditAction.RUNS_PURGED, viewer, "Purged 3 runs", ago=timedelta(days=3)))
    return rows


def _filters(**kw):
    return audit_log.AuditFilters(**kw)


class TestSelector:
    def test_it_filters_by_actor_action_object_and_time(self, log, operator, viewer):
        def ids(**kw):
            return [e.pk for e in audit_log.audit_events(filters=_filters(**kw))]

        assert ids() == [e.pk for e in log]  # newest first
        assert ids(actor="otto") == [e.pk for e in log[:5]]
        assert ids(actor="nobody-by-that-name") == []
        assert ids(action=AuditAction.ROLE_GRANTED) == [log[5].pk]
        assert ids(target_type="user", target_id=str(viewer.pk)) == [log[6].pk]
        now = timezone.now()
        assert ids(since=now - timedelta(hours=2, minutes=30)) == [e.pk for e in log[:3]]
        assert ids(until=now - timedelta(days=1)) == [log[5].pk, log[6].pk]
        assert ids(actor="otto", since=now - timedelta(minutes=90), until=now - timedelta(minutes=30)) == [log[1].pk]

    def test_its_keyset_pages_cover_every_row_once_and_go_back(self, log):
        first = audit_log.audit_page(filters=_filters(), per_page=3)
        second = audit_log.audit_page(filters=_filters(), per_page=3, after=first.next_cursor)
        third = audit_log.audit_page(filters=_filters(), per_page=3, after=second.next_cursor)
        seen = [r.id for p in (first, second, third) for r in p.object_list]
        assert seen == [e.pk for e in log] and not third.has_next and first.count == 7
        back = audit_log.audit_page(filters=_filters(), per_page=3, before=second.previous_cursor)
        assert [r.id for r in back.object_list] == [r.id for r in first.object_list] and not back.has_previous

    def test_a_cursor_it_did_not_hand_out_is_refused(self, log):
        with pytest.raises(InvalidCursor):
            audit_log.audit_page(filters=_filters(), after="bm90LWEtY3Vyc29y")

    def test_rows_link_to_their_objects_page_where_there_is_one(self, db, operator):
        from capabilities.kinds.python.sync import python_capabilities_sync
        from capabilities.models import Capability

        python_capabilities_sync()
        capability = Capability.objects.order_by("pk").first()
        _row(operator, AuditAction.ROLE_GRANTED, operator, "no page for a user")
        rows = audit_log.audit_rows(AuditEvent.objects.all())
        by_type = {r.target_type: r for r in rows}
        assert by_type["user"].object_url is None
        created = next(r for r in rows if r.target_type == "capability" and r.target_id == str(capability.pk))
        assert created.object_url == f"/capabilities/{capability.name}/"
        assert created.actor is None  # the sync: the system

    def test_secrets_in_details_are_masked(self, db, operator):
        _row(operator, AuditAction.MCP_SERVER_ADDED, operator, "Added an MCP server",
             details={"url": "https://bob:hunter2-secret@mcp.example.com/x", "api_key": "sk-live-123456",
                      "headers": {"Authorization": "Bearer abcdef123"}, "prefix": "ao_12345", "tokens": 400})
        row = audit_log.audit_rows(AuditEvent.objects.all())[0]
        text = json.dumps(row.details)
        for secret in ("hunter2-secret", "sk-live-123456", "abcdef123"):
            assert secret not in text
        assert row.details["prefix"] == "ao_12345" and row.details["tokens"] == 400
        assert row.details["url"] == "https://bob:[redacted]@mcp.example.com/x"


def test_only_the_lead_operator_and_auditor_roles_may_read_the_log():
    assert sorted(role for role, perms in ROLE_PERMISSIONS.items() if VIEW_AUDIT_LOG in perms) == \
        sorted([AUDITOR, LEAD_OPERATOR])
    assert not set(ROLE_PERMISSIONS[AUDITOR]) - set(ROLE_PERMISSIONS["viewer"]) - {VIEW_AUDIT_LOG}


@pytest.mark.django_db
class TestApi:
    def test_who_may_read_it(self, log, auditor, lead, nobody, viewer, operator, registry_admin, api_for, client):
        for user in (auditor, lead, _make_user("root", is_superuser=True)):
            for url in ("/api/audit/", "/api/audit/export/"):
                assert api_for(user).get(url).status_code == 200, (user, url)
        for user in (nobody, viewer, operator, registry_admin):
            for url in ("/api/audit/", "/api/audit/export/", "/api/audit/export/?format=json"):
                response = api_for(user).get(url)
                assert response.status_code == 403, (user, url)
                assert "view_audit_log" in response.json()["error"]["message"]
        assert client.get("/api/audit/").status_code in (401, 403)

    def test_it_filters_and_pages_by_cursor(self, log, auditor, api_for):
        api = api_for(auditor)
        body = api.get("/api/audit/", {"actor": "otto", "page_size": 2}).json()
        assert body["count"] == 5 and body["count_exact"] and body["previous"] is None
        assert [r["summary"] for r in body["results"]] == ["API token t0 created", "API token t1 created"]
        assert body["results"][0]["actor"] == "otto" and body["results"][0]["action"] == "token.created"
        seen = [r["id"] for r in body["results"]]
        while body["next"]:
            assert "actor=otto" in body["next"]
            body = api.get(body["next"]).json()
            seen += [r["id"] for r in body["results"]]
        assert seen == [e.pk for e in log[:5]]
        back = api.get(body["previous"]).json()
        assert [r["id"] for r in back["results"]] == seen[2:4]
        only = api.get("/api/audit/", {"action": "runs.purged"}).json()["results"]
        assert [(r["actor"], r["target_type"]) for r in only] == [(None, "user")]
        since = (timezone.now() - timedelta(minutes=90)).isoformat()
        assert len(api.get("/api/audit/", {"since": since}).json()["results"]) == 2
        assert len(api.get("/api/audit/", {"until": "2000-01-01"}).json()["results"]) == 0
        # As a filter form sends them: the empty fields are no filter.
        empty = {"actor": "", "action": "", "target_type": "", "target_id": "", "since": "", "until": ""}
        assert api.get("/api/audit/", empty).json()["count"] == 7

    @pytest.mark.parametrize("query,field", [
        ({"action": "run.exploded"}, "action"),
        ({"since": "yesterday"}, "since"),
        ({"until": "2026-13-45"}, "until"),
        ({"page_size": "100000"}, "page_size"),
        ({"page_size": "0"}, "page_size"),
        ({"actor": "<script>alert(1)</script>"}, "actor"),
        ({"actor": "x" * 151}, "actor"),
        ({"target_type": "Robert'); DROP TABLE--"}, "target_type"),
        ({"target_type": "run", "target_id": "1\x00"}, "target_id"),
        ({"target_id": "12"}, "target_id"),
        ({"since": "2026-12-02", "until": "2026-12-01"}, "until"),
        ({"after": "garbage!"}, "after"),
        ({"actr": "otto"}, "actr"),
    ])
    def test_bad_input_is_a_400_naming_the_field(self, query, field, log, auditor, api_for):
        response = api_for(auditor).get("/api/audit/", query)
        assert response.status_code == 400, response.content
        assert field in response.json()["error"]["fields"], response.json()

    def test_the_export_refuses_an_unknown_format_by_name(self, auditor, api_for):
        response = api_for(auditor).get("/api/audit/export/", {"format": "xml"})
        assert response.status_code == 400 and "format" in response.json()["error"]["fields"]
        response = api_for(auditor).get("/api/audit/export/", {"after": "x"})
        assert response.status_code == 400 and response.json()["error"]["fields"] == {"after": "unknown field"}


@pytest.mark.django_db
class TestExports:
    def _content(self, response) -> str:
        assert response.status_code == 200
        return b"".join(response.streaming_content).decode()

    def test_csv_holds_every_matching_row_with_the_same_filters(self, log, auditor, api_for, operator):
        _row(operator, AuditAction.TOKEN_CREATED, operator, "=HYPERLINK(\"http://evil.example\")",
             details={"password": "pw-very-secret"})
        response = api_for(auditor).get("/api/audit/export/", {"actor": "otto", "format": "csv"})
        assert response["Content-Type"].startswith("text/csv")
        assert response["Content-Disposition"].startswith('attachment; filename="audit-log-')
        text = self._content(response)
        rows = list(csv.DictReader(io.StringIO(text)))
        assert len(rows) == 6 and {r["actor"] for r in rows} == {"otto"}
        assert rows[0]["summary"].startswith("'=HYPERLINK")  # never a formula in a spreadsheet
        assert "pw-very-secret" not in text and json.loads(rows[0]["details"]) == {"password": "[redacted]"}

    def test_json_is_one_array_of_the_api_rows(self, log, auditor, api_for):
        response = api_for(auditor).get("/api/audit/export/", {"format": "json", "action": "token.created"})
        assert response["Content-Type"] == "application/json"
        rows = json.loads(self._content(response))
        assert [r["id"] for r in rows] == [e.pk for e in log[:5]]
        assert set(rows[0]) == {"id", "created_at", "actor", "action", "target_type", "target_id", "summary",
                                "details", "object_url"}

    def test_under_asgi_it_is_streamed_as_it_is_made(self, log, auditor, api_for):
        """The export reaches an ASGI server as an asynchronous stream (agentops.middleware), not read whole."""
        from asgiref.sync import async_to_sync
        from django.test import AsyncClient

        async def asgi_export():
            client = AsyncClient()
            await client.aforce_login(auditor)
            response = await client.get("/api/audit/export/", {"format": "json"})
            assert response.status_code == 200 and response.is_async
            return b"".join([chunk async for chunk in response.streaming_content])

        whole = self._content(api_for(auditor).get("/api/audit/export/", {"format": "json"}))
        assert json.loads(async_to_sync(asgi_export)()) == json.loads(whole)

    def test_an_empty_export_is_still_a_file(self, auditor, api_for):
        AuditEvent.objects.all().delete()
        assert json.loads(self._content(api_for(auditor).get("/api/audit/export/?format=json"))) == []
        assert self._content(api_for(auditor).get("/api/audit/export/")).splitlines() == [
            ",".join(audit_log.CSV_COLUMNS)]


@pytest.mark.django_db
class TestPage:
    def test_it_shows_the_rows_to_those_who_may_read_the_log(self, log, auditor, client_for):
        response = client_for(auditor).get("/audit/", {"actor": "otto", "page_size": 2, "action": "", "since": ""})
        assert response.status_code == 200
        html = response.content.decode()
        assert "API token t0 created" in html and "Purged 3 runs" not in html
        assert 'href="/audit/"' in html  # in the header nav
        assert "format=csv" in html and "actor=otto" in html and "Next →" in html

    def test_others_get_403_and_no_nav_link(self, log, viewer, operator, client_for):
        for user in (viewer, operator):
            client = client_for(user)
            assert client.get("/audit/").status_code == 403
            assert 'href="/audit/"' not in client.get("/runs/").content.decode()

    def test_bad_filters_are_a_400_naming_the_field(self, log, auditor, client_for):
        response = client_for(auditor).get("/audit/", {"since": "not a date", "action": "bogus"})
        assert response.status_code == 400
        html = response.content.decode()
        assert "<strong>since</strong>" in html and "<strong>action</strong>" in html
        assert client_for(auditor).get("/audit/", {"after": "garbage"}).status_code == 400

    def test_granting_the_auditor_role_opens_it(self, log, nobody, client_for):
        assert client_for(nobody).get("/audit/").status_code == 403
        grant_role(nobody, AUDITOR)
        assert client_for(nobody).get("/audit/").status_code == 200


@pytest.mark.django_db
def test_the_django_admins_audit_list_follows_the_same_permission(log, client_for, roles):
    staff_viewer = _make_user("stella", "viewer", is_staff=True)
    staff_auditor = _make_user("stan", AUDITOR, is_staff=True)
    assert client_for(staff_viewer).get("/admin/agentops/auditevent/").status_code == 403
    assert client_for(staff_auditor).get("/admin/agentops/auditevent/").status_code == 200
