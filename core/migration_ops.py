"""Operations the projects migrations share: everything that existed belongs to the default project."""
from __future__ import annotations

from django.db import migrations

DEFAULT_SLUG = "default"


def default_project_id(apps) -> int:
    Project = apps.get_model("agentops", "Project")
    project, _ = Project.objects.get_or_create(slug=DEFAULT_SLUG, defaults={"name": "Default"})
    return project.pk


def fill_default_project(app_label: str, *model_names: str) -> migrations.RunPython:
    """Give every row of these models without a project the default project (in place, by UPDATE)."""

    def forwards(apps, schema_editor):
        project_id = default_project_id(apps)
        for name in model_names:
            apps.get_model(app_label, name).objects.filter(project__isnull=True).update(project_id=project_id)

    return migrations.RunPython(forwards, migrations.RunPython.noop, elidable=False)
