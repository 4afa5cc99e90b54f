"""Slack and Discord incoming webhooks: a fixed vendor host, tokens in the path; posted by us."""
from __future__ import annotations

import json
from typing import Any

from notifications.errors import ChannelError
from notifications.senders.base import HttpSender, Outgoing


class SlackWebhook(HttpSender):
    vendor_hosts = ("hooks.slack.com",)

    def url(self, plugin: Any) -> str:
        if plugin.mode != "hook":
            raise ChannelError("only Slack incoming webhooks (slack://A/B/C) are offered", permanent=True)
        return f"https://hooks.slack.com/services/{plugin.token_a}/{plugin.token_b}/{plugin.token_c}"

    def outgoing(self, plugin: Any, *, title: str, body: str) -> Outgoing:
        text = f"*{title}*\n{body}" if title else body
        return Outgoing("POST", self.url(plugin), json.dumps({"text": text}).encode(),
                        {"Content-Type": "application/json", "User-Agent": plugin.app_id})


class DiscordWebhook(HttpSender):
    vendor_hosts = ("discord.com",)
    MAX_CHARS = 2000  # Discord refuses longer content

    def url(self, plugin: Any) -> str:
        return f"https://discord.com/api/webhooks/{plugin.webhook_id}/{plugin.webhook_token}"

    def outgoing(self, plugin: Any, *, title: str, body: str) -> Outgoing:
        text = (f"**{title}**\n{body}" if title else body)[: self.MAX_CHARS]
        return Outgoing("POST", self.url(plugin), json.dumps({"content": text}).encode(),
                        {"Content-Type": "application/json", "User-Agent": plugin.app_id})


SLACK, DISCORD = SlackWebhook(), DiscordWebhook()
