"""When a run's advance task was last sent, so the orphan sweep can tell a run waiting its turn
in the broker from one whose task was lost. Nullable, no default: adding it rewrites no rows.
No index: the sweep finds live runs by status (run_status_created_idx) and reads this beside it."""
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("runs", "0012_i16_stop_rollup"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="task_sent_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
