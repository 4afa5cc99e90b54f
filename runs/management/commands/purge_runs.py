"""Delete finished runs older than N days, with everything under them; audit events stay."""
from django.core.management.base import BaseCommand, CommandError

from core.errors import ServiceError
from runs.retention import BATCH_SIZE, purge_runs


class Command(BaseCommand):
    help = "Delete finished runs older than N days (batches, with progress). Audit events are kept."

    def add_arguments(self, parser):
        parser.add_argument("--older-than", type=int, required=True, metavar="N", help="days since the run finished")
        parser.add_argument("--dry-run", action="store_true", help="count what would be deleted, delete nothing")
        parser.add_argument("--batch-size", type=int, default=BATCH_SIZE, metavar="N")

    def handle(self, *args, older_than, dry_run, batch_size, **options):
        if not 1 <= batch_size <= 100_000:
            raise CommandError("--batch-size must be from 1 to 100,000.")

        def progress(report, total):
            self.stdout.write(f"  {report.runs}/{total} runs deleted ({report.attempts} attempts, "
                              f"{report.stored_outputs} stored outputs)")

        try:
            report = purge_runs(older_than_days=older_than, dry_run=dry_run, batch_size=batch_size,
                                progress=progress)
        except ServiceError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(report.summary().capitalize() + ".")
