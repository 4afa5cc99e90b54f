"""The scheduler's tick: find events, write the outbox, send what is due. Thin, safe to repeat."""
from celery import shared_task


@shared_task(name="notifications.tick", ignore_result=True)
def tick() -> dict:
    from notifications.outbox import tick as outbox_tick

    return outbox_tick()
