"""The demo capabilities, registered with `@capability`.

search_documents and get_document are pure. The ticket and notification
capabilities write rows through the Django models in `capabilities.models`, fenced
(`commit_fenced`): a worker paused past its lease cannot add a row after a takeover.
"""
from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Annotated, Any, Literal

from capabilities.kinds.python.registry import CallContext, capability, commit_fenced
from capabilities.models import OutboxMessage, Ticket

from . import search


@capability(timeout_s=5, retry={"max_attempts": 3, "backoff_s": 0.5})
def search_documents(q: Annotated[str, "words to look for"],
                     limit: Annotated[int, {"minimum": 1, "maximum": search.MAX_LIMIT}] = 5) -> dict[str, Any]:
    """Search the internal policy documents; ranked best first."""
    return search.search_documents(q, limit)


@capability(timeout_s=5)
def get_document(id: str) -> dict[str, str]:  # noqa: A002 - the argument name is the public schema
    """Fetch one policy document by id (for example POL-7)."""
    return search.get_document(id)


def _committed(model, idempotency_key: str | None, result: Callable[[Any], dict[str, Any]]) -> tuple[bool, Any]:
    """A status lookup's answer: whether the call with this key wrote its row, and the row's result if so."""
    row = model.objects.filter(idempotency_key=idempotency_key).first() if idempotency_key else None
    return (True, result(row)) if row else (False, None)


# -- tickets --------------------------------------------------------------------------------

def _ticket_result(ticket: Any) -> dict[str, Any]:
    return {"ticket_id": ticket.pk, "title": ticket.title, "status": ticket.status,
            "resolved_at": ticket.resolved_at.isoformat() if ticket.resolved_at else None}


def create_ticket_status(arguments: dict, idempotency_key: str | None) -> tuple[bool, Any]:
    """Did the create_ticket call with this key commit? (the ticket, if so)"""
    return _committed(Ticket, idempotency_key, _ticket_result)


@capability(side_effect="write", requires_approval=True, idempotent=True, permission="capabilities.create_ticket",
            timeout_s=5,
            status_lookup=create_ticket_status)
def create_ticket(title: str, body: str = "", *, context: CallContext) -> dict[str, Any]:
    """Open a support ticket; calling again with the same idempotency key returns the same ticket."""
    title = title.strip()
    if not title:
        raise ValueError("title must not be empty")
    # Without a key there is nothing to deduplicate on: every call is a new ticket.
    key = context.idempotency_key or f"adhoc-{uuid.uuid4()}"
    ticket, _created = commit_fenced(context, lambda: Ticket.objects.get_or_create(
        idempotency_key=key, defaults={"title": title, "body": body, "status": "open"}))
    return _ticket_result(ticket)


@capability(side_effect="read", timeout_s=5, polling={"max_attempts": 10, "interval_s": 5})
def get_ticket_status(ticket_id: int) -> dict[str, Any]:
    """Current status of a support ticket (open or resolved); poll until it is resolved."""
    ticket = Ticket.objects.filter(pk=ticket_id).first()
    if ticket is None:
        raise LookupError(f"no ticket {ticket_id}")
    return _ticket_result(ticket)


# -- notifications ----------------------------------------------------------------------------

def _message_result(message: Any) -> dict[str, Any]:
    return {"message_id": message.pk, "channel": message.channel, "recipient": message.recipient,
            "queued_at": message.created_at.isoformat() if message.created_at else None}


def send_notification_status(arguments: dict, idempotency_key: str | None) -> tuple[bool, Any]:
    """Did the send_notification call with this key commit? (the outbox message, if so)"""
    return _committed(OutboxMessage, idempotency_key, _message_result)


@capability(side_effect="external", requires_approval=True, idempotent=True, permission="capabilities.send_notification",
            timeout_s=5, status_lookup=send_notification_status)
def send_notification(channel: Literal["email", "slack"], recipient: str, message: str, *,
                      context: CallContext) -> dict[str, Any]:
    """Send a notification (queued in the outbox); the same idempotency key never sends twice."""

    if not recipient.strip() or not message.strip():
        raise ValueError("recipient and message must not be empty")
    key = context.idempotency_key or f"adhoc-{uuid.uuid4()}"
    outbox, _created = commit_fenced(context, lambda: OutboxMessage.objects.get_or_create(
        idempotency_key=key, defaults={"channel": channel, "recipient": recipient.strip(), "message": message}))
    return _message_result(outbox)
