"""Background work for the capability registry: try it, and the demo data."""
from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.utils import timezone

from capabilities.models import Ticket
from capabilities.try_it import capability_try_execute

# How long a demo ticket stays open before the "support team" resolves it, so a
# run polling get_ticket_status sees it change after a few polls.
DEMO_TICKET_OPEN_SECONDS = 20


@shared_task(name="capabilities.resolve_demo_tickets", ignore_result=True)
def resolve_demo_tickets() -> int:
    """Resolve demo tickets open for at least DEMO_TICKET_OPEN_SECONDS; returns how many.

    One conditional UPDATE: two workers (or a duplicate delivery) resolve each
    ticket once, and a ticket resolved meanwhile is left alone.
    """
    now = timezone.now()
    return Ticket.objects.filter(status=Ticket.Status.OPEN,
                                 created_at__lte=now - timedelta(seconds=DEMO_TICKET_OPEN_SECONDS)).update(
        status=Ticket.Status.RESOLVED, resolved_at=now)


@shared_task(name="capabilities.try_capability", ignore_result=False, acks_late=False)
def try_capability(*, version_id: int, arguments: dict, idempotency_key: str | None, trace_id: str, span_id: str,
                   actor_id: int | None) -> dict:
    """Run one "Try it" call where runs run; the page waits for the result.

    acks_late off: a try that a dying worker had started is not run a second
    time by another (the person trying sees "no worker answered" instead).
    """

    return capability_try_execute(version_id=version_id, arguments=arguments, idempotency_key=idempotency_key,
                                  trace_id=trace_id, span_id=span_id, actor_id=actor_id)
