"""PostgreSQL: a plan's step rows are inserted small (no progress yet) and about 2.5 times longer once
their step has run (its progress: status, counts, the last observation). Packed to 70 %, a page's
rows could not grow in place: 40 % of the step updates moved the row to another page and wrote an
entry in each of the table's six indexes (bench/RESULTS.md). Inserted to 35 % of a page, the rows
grow into the rest (a page ends about as full), and 98-99 % of those updates are HOT.
SQLite has no fillfactor."""
from django.db import migrations

FILLFACTOR = 35


def set_fillfactor(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE runs_step SET (fillfactor = {FILLFACTOR})")


def back_to_70(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE runs_step SET (fillfactor = 70)")


class Migration(migrations.Migration):

    dependencies = [
        ("runs", "0033_attempts_partitioned_by_month"),
    ]

    operations = [migrations.RunPython(set_fillfactor, back_to_70, elidable=False)]
