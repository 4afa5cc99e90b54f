"""Goal text search (`goal__icontains`) by trigram index on PostgreSQL.

Django's icontains is UPPER(goal) LIKE UPPER('%...%'): a trigram GIN index on UPPER(goal)
serves it. The extension needs a privileged role: when it cannot be created the search
still works, as a sequential scan, and the migration says so instead of failing.
SQLite has no such index; its scan of 100,000 goals stays near 100 ms (bench/search.py).
"""
import logging

from django.db import migrations, transaction

log = logging.getLogger(__name__)
INDEX = "run_goal_upper_trgm_idx"


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    try:
        with transaction.atomic(using=schema_editor.connection.alias):
            schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
            schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {INDEX} ON runs_run USING gin (UPPER(goal) gin_trgm_ops)")
    except Exception as exc:  # no privilege for the extension: search works without the index
        log.warning("goal search index not created (%s); goal search will scan", exc)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    dependencies = [("runs", "0008_i15_labels_saved_views")]

    operations = [migrations.RunPython(create, drop)]
