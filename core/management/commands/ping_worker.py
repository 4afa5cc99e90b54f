"""Send a task through the broker and wait until a worker has done it."""
import time
import uuid

from django.core.management.base import BaseCommand, CommandError

from core.models import WorkerHeartbeat
from core.tasks import heartbeat


class Command(BaseCommand):
    help = "Check that a Celery worker takes and completes a task (exit 1 if none does in time)."

    def add_arguments(self, parser):
        parser.add_argument("--timeout", type=float, default=30.0)

    def handle(self, *args, timeout, **options):
        token = f"ping-{uuid.uuid4().hex[:12]}"
        started = time.monotonic()
        heartbeat.delay(token)
        while time.monotonic() - started < timeout:
            if WorkerHeartbeat.objects.filter(worker=token).exists():
                elapsed = (time.monotonic() - started) * 1000
                WorkerHeartbeat.objects.filter(worker=token).delete()
                self.stdout.write(f"worker answered in {elapsed:.0f} ms")
                return
            time.sleep(0.05)
        raise CommandError(f"no worker completed the ping task within {timeout:.0f} s")
