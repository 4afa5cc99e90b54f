"""The Celery application. Tasks live in each app's tasks.py and stay thin."""
import os

from celery import Celery, signals
from celery.concurrency import get_implementation
from django.db import connections
from kombu.transport import TRANSPORT_ALIASES

from core.db_sessions import check_session

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


# Whether this worker runs each task in a greenlet of its own (gevent, eventlet): a connection is
# then the greenlet's, and one kept after its task would never be used again.
_TASKS_IN_NEW_GREENLETS = False


@signals.worker_init.connect
def note_the_pool(sender=None, **_kwargs) -> None:
    global _TASKS_IN_NEW_GREENLETS
    _TASKS_IN_NEW_GREENLETS = get_implementation(sender.pool_cls).is_green


@signals.task_prerun.connect
@signals.task_postrun.connect
def close_old_database_connections(sender=None, signal=None, **_kwargs) -> None:
    """Around each task, what Django does around a request: close this thread's connections that
    broke (a database restart) or outlived CONN_MAX_AGE, keep the rest (settings.CELERY_DB_REUSE_MAX),
    so a pool thread's next run slice reuses its session. A greenlet's connections close with its task.
    Not for a task run eagerly inside a caller's transaction (a test's, say)."""
    if getattr(getattr(sender, "request", None), "is_eager", False):
        return
    if _TASKS_IN_NEW_GREENLETS and signal is signals.task_postrun:
        connections.close_all()
    else:
        check_session()
