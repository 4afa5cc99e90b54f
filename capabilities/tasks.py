"""Background work for the capability registry's demo data."""
from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.utils import timezone

from capabilities.models import Ticket

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
