"""Recount the dashboard rollup from the run and attempt tables (after a restore or a bulk load)."""
from django.core.management.base import BaseCommand

from runs.dashboard import rollup
from runs.models import AttemptRollup, RunRollup


class Command(BaseCommand):
    help = "Recount the dashboard's hourly rollup from the runs and attempts tables."

    def handle(self, *args, **options):
        rollup.rebuild()
        self.stdout.write(f"Rollup rebuilt: {RunRollup.objects.count()} run rows, "
                          f"{AttemptRollup.objects.count()} attempt rows.")
