"""slackapp://C0123ABCD: a channel of the AgentOps Slack app, posted to with chat.postMessage.

Unlike a slack:// incoming webhook, the app can post interactive messages: an approval request
gets Approve / Reject buttons and is updated when it is decided. The token is the app's
(AGENTOPS_SLACK_BOT_TOKEN), never part of the channel's URL.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from capabilities.netguard import NetGuard
from notifications.errors import ChannelError
from notifications.models import SlackMessage
from notifications.senders.base import ApprovalSender, Destination, Sender
from notifications.slack import api, blocks, messages

SCHEME = "slackapp"
CHANNEL_ID = re.compile(r"^[A-Z0-9]{2,40}$")


@dataclass(frozen=True)
class SlackAppChannel:
    channel: str


class SlackAppSender(Sender, ApprovalSender):
    vendor_hosts = api.VENDOR_HOSTS

    def read(self, url: str) -> SlackAppChannel:
        channel = url.split("://", 1)[1].strip().strip("/") if "://" in url else ""
        if not CHANNEL_ID.match(channel):
            raise ChannelError("write slackapp://CHANNEL_ID, the Slack channel's ID (e.g. slackapp://C0123ABCD), "
                               "and invite the app to that channel", permanent=True)
        return SlackAppChannel(channel)

    def destination(self, plugin: Any) -> Destination:
        return Destination(*api.host_and_port())

    def send(self, plugin: SlackAppChannel, *, title: str, body: str, guard: NetGuard) -> None:
        text = f"*{title}*\n{body}" if title else body
        api.call("chat.postMessage", {"channel": plugin.channel, "text": text[:3900]}, guard=guard)

    def send_approval(self, plugin: SlackAppChannel, *, approval: Any, title: str, body: str,
                      guard: NetGuard) -> None:
        answer = api.call("chat.postMessage", {
            "channel": plugin.channel, "text": title[:300],
            "blocks": blocks.request_blocks(approval, inbox_url=messages.inbox_url(approval))}, guard=guard)
        SlackMessage.objects.create(approval=approval, slack_channel=str(answer.get("channel") or plugin.channel),
                                    ts=str(answer.get("ts", "")))


SLACK_APP = SlackAppSender()
