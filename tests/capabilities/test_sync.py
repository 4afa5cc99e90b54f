"""Python capabilities from code: what sync writes, and what it leaves alone."""
from __future__ import annotations

import pytest

from capabilities import policy
from capabilities.kinds.python import sync
from capabilities.models import Capability, CapabilityVersion
from core.models import AuditEvent

from .conftest import audit_for

pytestmark = pytest.mark.django_db


class TestSync:
    def test_migrate_left_the_demo_functions_registered(self):
        names = set(Capability.objects.filter(kind="python").values_list("name", flat=True))
        assert {"search_documents", "get_document", "create_ticket", "get_ticket_status",
                "send_notification"} <= names
        create = Capability.objects.get(name="create_ticket").current_version
        assert (create.side_effect, create.idempotent, create.status_lookup) == ("write", True, True)
        assert create.config["function"] == "capabilities.demo.functions:create_ticket"

    def test_sync_is_idempotent(self):
        versions = CapabilityVersion.objects.count()
        events = AuditEvent.objects.count()
        first = sync.python_capabilities_sync(modules=sync.DEMO_MODULES)
        second = sync.python_capabilities_sync(modules=sync.DEMO_MODULES)
        assert not first.created and not first.updated and not first.errors
        assert second.unchanged == first.unchanged
        assert CapabilityVersion.objects.count() == versions and AuditEvent.objects.count() == events

    def test_sync_creates_a_missing_capability_with_an_audit_event(self):
        from dataclasses import replace

        from capabilities.kinds.python.registry import registered_capabilities

        definition = replace(registered_capabilities()["get_document"], name="fetch_document")
        result = sync.python_capabilities_sync(definitions={"fetch_document": definition})
        assert result.created == ["fetch_document"]
        capability = Capability.objects.get(name="fetch_document")
        assert (capability.kind, capability.current_version.number, capability.current_version.created_by) == (
            "python", 1, None)
        assert audit_for(capability) == ["capability.created"]

    def test_sync_never_re_enables_a_disabled_capability(self, registry_admin):
        search = Capability.objects.get(name="search_documents")
        policy.capability_set_enabled(user=registry_admin, capability_id=search.pk, enabled=False)
        sync.python_capabilities_sync(modules=sync.DEMO_MODULES)
        search.refresh_from_db()
        assert search.enabled is False

    def test_sync_keeps_an_operators_edit_and_applies_only_what_the_code_changed(self, registry_admin):
        from dataclasses import replace

        from capabilities.kinds.python.registry import registered_capabilities

        search = Capability.objects.get(name="search_documents")
        policy.capability_update(user=registry_admin, capability_id=search.pk, policy={"requires_approval": True})
        definitions = {name: d for name, d in registered_capabilities().items()
                       if d.dotted_path.startswith("capabilities.demo.")}
        definitions["search_documents"] = replace(definitions["search_documents"], timeout_s=7.0)
        result = sync.python_capabilities_sync(definitions=definitions)
        assert result.updated == ["search_documents"]
        search.refresh_from_db()
        current = search.current_version
        assert (current.number, current.timeout_s, current.requires_approval) == (3, 7.0, True)
        assert current.created_by is None and current.change_note.startswith("Synced from code")
        again = sync.python_capabilities_sync(definitions=definitions)
        assert again.updated == [] and "search_documents" in again.unchanged

    def test_the_command_reports_and_is_idempotent(self):
        from io import StringIO

        from django.core.management import call_command

        out = StringIO()
        call_command("sync_capabilities", stdout=out)
        call_command("sync_capabilities", stdout=out)
        assert "0 created, 0 updated" in out.getvalue()

    def test_the_demo_ticket_task_resolves_tickets_open_for_20_seconds(self):
        from datetime import timedelta

        from django.utils import timezone

        from capabilities.models import Ticket
        from capabilities.tasks import resolve_demo_tickets

        old = Ticket.objects.create(idempotency_key="k1", title="old")
        Ticket.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(seconds=21))
        new = Ticket.objects.create(idempotency_key="k2", title="new")
        assert resolve_demo_tickets() == 1
        assert resolve_demo_tickets() == 0
        old.refresh_from_db()
        new.refresh_from_db()
        assert (old.status, new.status) == ("resolved", "open") and old.resolved_at is not None
