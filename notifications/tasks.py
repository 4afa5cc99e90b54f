"""The scheduler's tick (find events, write the outbox, send what is due) and the Slack refresh. Thin, safe to repeat."""
import logging

from celery import shared_task

from notifications.models import SlackMessage
from notifications.outbox import drain as outbox_drain
from notifications.outbox import tick as outbox_tick
from notifications.slack import messages as slack_messages

log = logging.getLogger(__name__)


@shared_task(name="notifications.tick", ignore_result=True)
def tick() -> dict:
    return outbox_tick()


@shared_task(name="notifications.send_due", ignore_result=True)
def send_due() -> int:
    """Send the deliveries due now (a usage burn rule just fired) without waiting for the tick."""
    return outbox_drain()[0]


@shared_task(name="notifications.slack_refresh", ignore_result=True)
def slack_refresh(approval_id: int) -> int:
    """Show a decision made elsewhere in the request's Slack messages."""
    return slack_messages.refresh_all(approval_id=approval_id)


def on_approval_decided(sender, *, approval_id: int, channel: str, **kwargs) -> None:
    """runs.signals.approval_decided: queue the Slack refresh (a click in Slack refreshed its own message)."""
    if channel == "slack" or not SlackMessage.objects.filter(approval_id=approval_id, shown_state="pending").exists():
        return
    try:
        slack_refresh.delay(approval_id)
    except Exception:  # the decision is committed; the scheduler's next tick updates the message
        log.exception("could not queue the Slack refresh of approval %s", approval_id)
