"""The Celery application. Tasks live in each app's tasks.py and stay thin."""
import os

from celery import Celery
from kombu.transport import TRANSPORT_ALIASES

# CELERY_BROKER_URL "embedded://" (the default) is the crash-safe filesystem broker.
TRANSPORT_ALIASES.setdefault("embedded", "agentops.embedded_broker:Transport")
# redis:// through a transport that survives a Redis restart (agentops/redis_broker.py).
TRANSPORT_ALIASES["redis"] = TRANSPORT_ALIASES["rediss"] = "agentops.redis_broker:Transport"

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")

app = Celery("agentops")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
