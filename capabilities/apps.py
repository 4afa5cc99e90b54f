import logging

from django.apps import AppConfig
from django.db.models.signals import post_migrate

log = logging.getLogger(__name__)


def sync_python_capabilities(sender, using="default", plan=None, **kwargs):
    """After `migrate`, register the @capability functions so the registry matches the code.

    Skipped when the registry's tables are not there (migrating backwards) and
    on databases other than the default one.
    """
    from django.db import connections

    if using != "default":
        return
    tables = set(connections[using].introspection.table_names())
    if not {"capabilities_capability", "capabilities_capabilityversion", "agentops_auditevent"} <= tables:
        return
    from django.conf import settings

    from capabilities.kinds.python.sync import python_capabilities_sync

    # Only the configured modules: a test session has imported test-only @capability functions too.
    modules = tuple(settings.AGENTOPS_CAPABILITY_MODULES)
    result = python_capabilities_sync(modules=modules)
    if kwargs.get("verbosity", 1) >= 1 and (result.created or result.updated):
        log.info("capability sync: created %s, updated %s", result.created, result.updated)
    for name, message in result.errors.items():
        log.error("capability sync: %s: %s", name, message)


def sync_into_new_project(sender, instance, created=False, raw=False, **kwargs):
    """A new project's registry starts with the code's capabilities, as every project's does."""
    if not created or raw:
        return
    from django.conf import settings

    from capabilities.kinds.python.sync import python_capabilities_sync
    from core.projects import project_scope

    with project_scope(instance):
        python_capabilities_sync(modules=tuple(settings.AGENTOPS_CAPABILITY_MODULES))


class CapabilitiesConfig(AppConfig):
    name = "capabilities"
    verbose_name = "Capability registry"

    def ready(self):
        post_migrate.connect(sync_python_capabilities, sender=self, dispatch_uid="capabilities.sync_python")
        from django.db.models.signals import post_save

        from core.models import Project

        post_save.connect(sync_into_new_project, sender=Project, dispatch_uid="capabilities.sync_new_project")
        from capabilities.selectors import audit_capability_pages
        from core.audit_log import register_object_pages

        # The audit log links a capability's rows to its page.
        register_object_pages("capability", audit_capability_pages)
        from celery.signals import worker_process_shutdown, worker_shutdown

        # Stop the stdio MCP servers this worker started (prefork children exit without atexit).
        worker_shutdown.connect(close_stdio_sessions, dispatch_uid="capabilities.close_stdio_sessions")
        worker_process_shutdown.connect(close_stdio_sessions, dispatch_uid="capabilities.close_stdio_sessions_child")


def close_stdio_sessions(**kwargs):
    from capabilities.kinds.mcp import pool as mcp_pool

    mcp_pool.pool().close_all()
