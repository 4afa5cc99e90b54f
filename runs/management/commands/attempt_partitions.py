"""PostgreSQL: list the attempts table's monthly partitions (rows, size), and create the months ahead."""
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.utils import timezone

from runs import partitions


class Command(BaseCommand):
    help = ("List the attempts table's monthly partitions with their rows and size (PostgreSQL); "
            "--ensure creates the months ahead, as the scheduler does every six hours.")

    def add_arguments(self, parser):
        parser.add_argument("--ensure", action="store_true", help="create the missing months first")
        parser.add_argument("--ahead", type=int, default=None, metavar="N",
                            help="months ahead of this one (default: AGENTOPS_ATTEMPT_PARTITIONS_AHEAD)")

    def handle(self, *args, ensure, ahead, **options):
        if not partitions.is_partitioned():
            self.stdout.write(f"Attempts are one table on {connection.vendor}: partitions are PostgreSQL's.")
            return
        if ahead is not None and not 1 <= ahead <= 120:
            raise CommandError("--ahead must be a number of months from 1 to 120.")
        if ensure:
            created = partitions.ensure(now=timezone.now(),
                                        ahead=settings.AGENTOPS_ATTEMPT_PARTITIONS_AHEAD if ahead is None else ahead)
            self.stdout.write(f"Created {len(created)} months" + (f": {', '.join(created)}." if created else "."))
        left = 0
        for partition in partitions.partitions():
            rows, size = partitions.estimate(partition)
            if partition.is_default:
                # Counted, not estimated (the estimate says 0 until ANALYZE): it is empty unless a tick was missed.
                rows = left = partitions.count_rows(partition)
            span = "rows no month holds" if partition.is_default else f"{partition.start:%Y-%m}"
            self.stdout.write(f"{partition.name:<28} {span:<20} ~{rows:>12,} rows {size / 2**20:>10.1f} MB")
        if left:
            self.stdout.write(self.style.WARNING(
                f"The default partition holds {left:,} row{'' if left == 1 else 's'}: "
                "--ensure moves them into months of their own."))
