"""Stops per capability in the dashboard's rollup: the dashboard read them (for its window and the
one before, beside each other) with two scans of the runs table, 0.5 s at a million runs for 7 days."""
from django.db import migrations, models


def fill_stops(apps, schema_editor):
    # Count the runs that finished before these rows existed (nothing to do on a new install).
    if apps.get_model("runs", "Run").objects.exists():
        from runs.dashboard import rollup

        rollup.rebuild_stops()


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0011_checkpoint_lz4'),
    ]

    operations = [
        migrations.CreateModel(
            name='StopRollup',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('hour', models.IntegerField()),
                ('stop_reason', models.CharField(max_length=40)),
                ('capability_name', models.CharField(blank=True, max_length=80)),
                ('runs', models.PositiveBigIntegerField(default=0)),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('hour', 'stop_reason', 'capability_name'), name='stop_rollup_key')],
            },
        ),
        migrations.RunPython(fill_stops, migrations.RunPython.noop),
    ]
