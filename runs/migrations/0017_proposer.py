"""Who proposed each plan revision (four-eyes and the proposer's permissions).

Filled for existing revisions: an external run's from its plan submission, any other's from
the owner. Depends on 0015; another branch may add 0016 (the chain is fixed at merge).
"""
from django.conf import settings
from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def fill(apps, schema_editor):
    PlanRevision = apps.get_model("runs", "PlanRevision")
    PlanSubmission = apps.get_model("runs", "PlanSubmission")
    submitter = PlanSubmission.objects.filter(run_id=OuterRef("run_id"), revision=OuterRef("number")).values(
        "submitted_by_id")[:1]
    PlanRevision.objects.filter(run__planner="external").update(proposed_by_id=Subquery(submitter))
    PlanRevision.objects.exclude(run__planner="external").update(
        proposed_by_id=Subquery(apps.get_model("runs", "Run").objects.filter(pk=OuterRef("run_id")).values(
            "owner_id")[:1]))


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0016_gateway_planner"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="planrevision",
            name="proposed_by",
            field=models.ForeignKey(blank=True, null=True, on_delete=models.deletion.SET_NULL, related_name="+",
                                    to=settings.AUTH_USER_MODEL),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
    ]
