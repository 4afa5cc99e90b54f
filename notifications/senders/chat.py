"""Slack and Discord incoming webhooks (a fixed vendor host, tokens in the path) and Teams workflows; posted by us."""
from __future__ import annotations

import json
from typing import Any

from notifications.errors import ChannelError
from notifications.senders.base import HttpSender, Outgoing, same_host


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


class TeamsWorkflow(HttpSender):
    """workflow:// (Microsoft Teams through Power Automate / Logic Apps): the host is the URL's own,
    so it must be on the allowlist (e.g. *.logic.azure.com); Apprise builds the Adaptive Card."""

    def url(self, plugin: Any) -> str:
        if len(plugin.template):  # a card template is read from a path or URL: another way out
            raise ChannelError("workflow:// card templates are not offered", permanent=True)
        path = "/powerautomate/automations/direct" if plugin.power_automate else ""
        if path and plugin.routing_id:
            path += f"/cu/{plugin.routing_id}"
        port = f":{plugin.port}" if plugin.port else ""
        return same_host(f"https://{plugin.host}{port}{path}/workflows/{plugin.workflow}/triggers/manual/paths/invoke",
                         plugin.host)

    def outgoing(self, plugin: Any, *, title: str, body: str) -> Outgoing:
        from apprise import NotifyType

        params = {"api-version": plugin.api_version, "sp": "/triggers/manual/run", "sv": "1.0",
                  "sig": plugin.signature}
        payload = plugin.gen_payload(body=body, title=title, notify_type=NotifyType.INFO)
        return Outgoing("POST", self.url(plugin), json.dumps(payload).encode(),
                        {"Content-Type": "application/json", "User-Agent": plugin.app_id}, params)


TEAMS = TeamsWorkflow()
