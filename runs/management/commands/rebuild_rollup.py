"""Recount the dashboard and usage rollups from the run and attempt tables (after a restore or a bulk load)."""
from django.core.management.base import BaseCommand

from runs.dashboard import rollup, usage
from runs.models import AttemptRollup, RunRollup, UsageCapabilityRollup, UsageLabelRollup, UsageRollup


class Command(BaseCommand):
    help = "Recount the dashboard's and the usage page's hourly rollups from the runs and attempts tables."

    def handle(self, *args, **options):
        rollup.rebuild()
        usage.rebuild()
        self.stdout.write(f"Rollup rebuilt: {RunRollup.objects.count()} run rows, "
                          f"{AttemptRollup.objects.count()} attempt rows; usage: {UsageRollup.objects.count()} "
                          f"model/owner/agent rows, {UsageLabelRollup.objects.count()} label rows, "
                          f"{UsageCapabilityRollup.objects.count()} capability rows.")
