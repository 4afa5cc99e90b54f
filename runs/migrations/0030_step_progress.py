"""Each step's progress on its Step row, each attempt's history entry on its Attempt row, the run's
checkpoint a head without them (runs/checkpoint.py).

Live runs have their checkpoint split here: the progress of each step of the current revision
goes to its row and the head says so. A finished run's checkpoint is never advanced again and
stays as it was (it still loads).
"""
from django.db import migrations, models

LIVE = ("queued", "running", "awaiting_approval")
DEFAULTS = {"status": "pending", "attempts": 0, "retries_used": 0, "polls_used": 0, "next_kind": "call",
            "approved_arguments_hash": None, "committed": False, "last_observation": None}


def split_live_checkpoints(apps, schema_editor):
    Run = apps.get_model("runs", "Run")
    Step = apps.get_model("runs", "Step")
    for run in Run.objects.filter(status__in=LIVE).only("pk", "state").iterator(chunk_size=500):
        state = dict(run.state or {})
        if state.get("steps_apart") or "steps" not in state:
            continue
        for entry in state.pop("steps") or ():
            progress = {k: v for k, v in entry.items() if k not in ("step", "index")}
            Step.objects.filter(run_id=run.pk, revision__number=state.get("revision") or 0,
                                key=entry["step"]["id"]).update(progress=None if progress == DEFAULTS else progress)
        state["steps_apart"] = True
        Run.objects.filter(pk=run.pk).update(state=state)


def step_fillfactor(apps, schema_editor):
    # A pass now updates its step's row (progress, status), which no index covers: room on its page
    # makes that update HOT (the step's first progress makes the row longer).
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE runs_step SET (fillfactor = 70)")


def reset_step_fillfactor(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE runs_step RESET (fillfactor)")


class Migration(migrations.Migration):

    dependencies = [
        ("runs", "0029_attempt_indexes"),
    ]

    operations = [
        migrations.RunPython(step_fillfactor, reset_step_fillfactor, elidable=False),
        migrations.AddField(
            model_name="step",
            name="progress",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="attempt",
            name="history_entry",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.RunPython(split_live_checkpoints, migrations.RunPython.noop),
    ]
