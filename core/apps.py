from django.apps import AppConfig
from django.db.models.signals import pre_save
from django.urls import register_converter
from django.urls.converters import get_converters

from core.converters import IdConverter
from core.projects import in_active_project


def _fill_project(sender, instance, raw=False, **kwargs):
    """A row that belongs to a project and is created without one gets the project in scope."""
    if not raw and instance._state.adding and any(f.name == "project" for f in sender._meta.concrete_fields):
        in_active_project(instance)


class CoreConfig(AppConfig):
    name = "core"
    # The label the app had when it lived in the project package: existing databases keep
    # their tables (agentops_*), migration history and permissions ("agentops.view_auditevent").
    label = "agentops"
    verbose_name = "AgentOps"

    def ready(self):
        from core import tokens  # noqa: F401  (revokes tokens when a password changes)

        pre_save.connect(_fill_project, dispatch_uid="core.projects.fill_project")
        if "id" not in get_converters():   # before any URLconf is loaded
            register_converter(IdConverter, "id")
