"""The scheduler's tick: find events, write the outbox, send what is due. Thin, safe to repeat."""
from celery import shared_task

from notifications.outbox import tick as outbox_tick


@shared_task(name="notifications.tick", ignore_result=True)
def tick() -> dict:
    return outbox_tick()
