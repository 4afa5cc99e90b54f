"""The Celery application. Tasks live in each app's tasks.py and stay thin."""
import os

from celery import Celery, signals
from kombu.transport import TRANSPORT_ALIASES

# CELERY_BROKER_URL "embedded://" (the default) is the crash-safe filesystem broker.
TRANSPORT_ALIASES.setdefault("embedded", "agentops.embedded_broker:Transport")
# redis:// through a transport that survives a Redis restart (agentops/redis_broker.py).
TRANSPORT_ALIASES["redis"] = TRANSPORT_ALIASES["rediss"] = "agentops.redis_broker:Transport"

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")

app = Celery("agentops")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.worker_init.connect
def share_the_result_backend(**_kwargs) -> None:
    """In a worker, one result backend for all its threads instead of one built per thread (2.6 ms of
    CPU each, paid by every thread at once when a worker takes 64 runs). Worker threads only store
    results; nothing in a task waits on one. The web process keeps Celery's default (a backend per
    thread), as its threads wait on results (Try it) through a connection each."""
    app.conf.result_backend_thread_safe = True
