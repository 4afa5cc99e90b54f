"""The evaluation models now live in the evaluation app: remove them from this app's state (the
tables stay), re-point their content types and permissions, and re-sync the role groups."""

import django.db.models.deletion
from django.db import migrations, models

from core.roles import sync_role_groups

MOVED = ("evaluationsuite", "evaluation", "evaluationresult")


def move_content_types(apps, schema_editor):
    """runs.<model> becomes evaluation.<model>, keeping its permissions and who holds them."""
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    for model in MOVED:
        old = ContentType.objects.filter(app_label="runs", model=model).first()
        if old is None:
            continue
        new = ContentType.objects.filter(app_label="evaluation", model=model).first()
        if new is None:
            old.app_label = "evaluation"
            old.save(update_fields=["app_label"])
            continue
        # Both exist (a role sync ran in between): carry holders over to the new rows.
        for perm in Permission.objects.filter(content_type=old):
            twin = Permission.objects.filter(content_type=new, codename=perm.codename).first()
            if twin is None:
                perm.content_type = new
                perm.save(update_fields=["content_type"])
                continue
            twin.group_set.add(*perm.group_set.all())
            twin.user_set.add(*perm.user_set.all())
            perm.delete()
        old.delete()


def move_then_sync(apps, schema_editor):
    move_content_types(apps, schema_editor)
    sync_role_groups(apps, schema_editor)


class Migration(migrations.Migration):

    dependencies = [
        ('evaluation', '0001_initial'),
        ('runs', '0009_i15_goal_trigram_index'),
        ('contenttypes', '0002_remove_content_type_name'),
        ('auth', '0012_alter_user_first_name_max_length'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.RemoveField(
                model_name='evaluation',
                name='started_by',
            ),
            migrations.RemoveField(
                model_name='evaluation',
                name='suite',
            ),
            migrations.AlterField(
                model_name='run',
                name='evaluation',
                field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='runs', to='evaluation.evaluation'),
            ),
            migrations.RemoveField(
                model_name='evaluationresult',
                name='evaluation',
            ),
            migrations.RemoveField(
                model_name='evaluationresult',
                name='run',
            ),
            migrations.DeleteModel(
                name='EvaluationSuite',
            ),
            migrations.DeleteModel(
                name='Evaluation',
            ),
            migrations.DeleteModel(
                name='EvaluationResult',
            ),
        ]),
        migrations.RunPython(move_then_sync, migrations.RunPython.noop),
    ]
