"""Worker health: a task any worker can take, proving it is alive and connected."""
import socket

from celery import shared_task
from django.db.models import F
from django.utils import timezone

from core.models import WorkerHeartbeat


@shared_task(name="agentops.heartbeat", ignore_result=True)
def heartbeat(worker: str = "") -> str:
    name = worker or socket.gethostname()
    updated = WorkerHeartbeat.objects.filter(worker=name).update(seen_at=timezone.now(), tasks_seen=F("tasks_seen") + 1)
    if not updated:
        WorkerHeartbeat.objects.get_or_create(worker=name, defaults={"seen_at": timezone.now(), "tasks_seen": 1})
    return name
