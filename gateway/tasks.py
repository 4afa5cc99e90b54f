"""The gateway's Celery tasks: thin interfaces to gateway.services, safe to repeat."""
from celery import shared_task

from gateway import services


@shared_task(name="gateway.end_lost_sessions", ignore_result=True)
def end_lost_sessions() -> int:
    return services.sessions_lost_end()
