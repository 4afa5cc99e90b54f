"""Who sends a notification for a channel scheme: our own senders, pinned to the checked address.

Adding a kind is a module and a line in SENDERS. Any other Apprise scheme is refused unless
an admin allows it by name (AGENTOPS_NOTIFY_EXTRA_SCHEMES); Apprise then sends it itself.
"""
from __future__ import annotations

from django.conf import settings

from notifications.errors import ChannelError
from notifications.senders import apprise_sender, chat, slack_app, smtp, webhook
from notifications.senders.base import Sender

SENDERS: dict[str, Sender] = {
    "json": webhook.JSON, "jsons": webhook.JSON,
    "xml": webhook.XML, "xmls": webhook.XML,
    "form": webhook.FORM, "forms": webhook.FORM,
    "mailto": smtp.SMTP, "mailtos": smtp.SMTP,
    "slack": chat.SLACK,
    slack_app.SCHEME: slack_app.SLACK_APP,  # the Slack app: interactive approval requests
    "discord": chat.DISCORD,
    "workflow": chat.TEAMS, "workflows": chat.TEAMS,
}
EXTRA_SCHEMES_SETTING = "AGENTOPS_NOTIFY_EXTRA_SCHEMES"


def sender_for(scheme: str) -> Sender:
    if scheme in SENDERS:
        return SENDERS[scheme]
    if scheme in settings.AGENTOPS_NOTIFY_EXTRA_SCHEMES:
        return apprise_sender.APPRISE
    raise ChannelError(f"channels of the {scheme}:// kind are not offered (we send {', '.join(sorted(SENDERS))}); "
                       f"an admin may allow it by name in {EXTRA_SCHEMES_SETTING}", permanent=True)
