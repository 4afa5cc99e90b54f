"""json://, xml://, form:// (and their s-forms): Apprise's payloads, posted by us.

The URL's parts (host, port, path, method, +headers, -params, :payload mappings) come from
Apprise's own plugin, so a channel means what the Apprise documentation says it means.
"""
from __future__ import annotations

import json
import re
from abc import abstractmethod
from typing import Any
from urllib.parse import urlencode

from notifications.senders.base import HttpSender, Outgoing, same_host

NOTIFY_TYPE = "info"


class Webhook(HttpSender):
    content_type = ""

    def url(self, plugin: Any) -> str:
        scheme = "https" if plugin.secure else "http"
        bare = (plugin.host or "").strip("[]")   # Apprise keeps an IPv6 literal's brackets
        host = f"[{bare}]" if ":" in bare else bare
        port = f":{plugin.port}" if isinstance(plugin.port, int) else ""
        return same_host(f"{scheme}://{host}{port}{plugin.fullpath or ''}", plugin.host)

    def outgoing(self, plugin: Any, *, title: str, body: str) -> Outgoing:
        headers = {"User-Agent": plugin.app_id, **({"Content-Type": self.content_type} if self.content_type else {}),
                   **plugin.headers}
        auth = (plugin.user, plugin.password or "") if plugin.user else None
        return Outgoing(plugin.method, self.url(plugin), self.payload(plugin, title, body), headers,
                        dict(plugin.params) or None, auth)

    @abstractmethod
    def payload(self, plugin: Any, title: str, body: str) -> bytes:
        """The body in this webhook's format."""


class JsonWebhook(Webhook):
    content_type = "application/json"

    def payload(self, plugin, title, body):
        payload: dict[str, Any] = {"version": plugin.json_version, "title": title, "message": body,
                                   "attachments": [], "type": NOTIFY_TYPE}
        for key, value in plugin.payload_extras.items():  # Apprise's :key=value rules: rename, drop, add
            if key in payload:
                if value:
                    payload[value] = payload[key]
                del payload[key]
            else:
                payload[key] = value
        return json.dumps(payload).encode()


def _mapped(plugin: Any, fields: dict[str, str]) -> dict[str, str]:
    """Apprise's payload_map: each standard field under the name the URL gave it (empty: left out)."""
    return {plugin.payload_map[key]: value for key, value in fields.items() if plugin.payload_map.get(key)}


class FormWebhook(Webhook):
    content_type = "application/x-www-form-urlencoded"

    def payload(self, plugin, title, body):
        return urlencode({**_mapped(plugin, {"version": plugin.form_version, "title": title,
                                                   "message": body, "type": NOTIFY_TYPE}), **plugin.payload_extras}).encode()


class XmlWebhook(Webhook):
    content_type = "application/xml"

    def payload(self, plugin, title, body):
        escape = lambda v: plugin.escape_html(v, whitespace=False)  # noqa: E731
        fields = {k: escape(v) for k, v in _mapped(plugin, {
            "Version": plugin.xsd_ver, "Subject": title, "Message": body, "MessageType": NOTIFY_TYPE}).items()}
        fields.update({k: escape(v) for k, v in plugin.payload_extras.items()})
        parts = {"{{XSD_URL}}": f' xmlns:xsi="{plugin.xsd_url}"' if plugin.xsd_url else "", "{{ATTACHMENTS}}": "",
                 "{{CORE}}": "".join(f"<{k}>{v}</{k}>" for k, v in fields.items())}
        return re.sub("|".join(re.escape(k) for k in parts), lambda m: parts[m.group()], plugin.payload).encode()


JSON, FORM, XML = JsonWebhook(), FormWebhook(), XmlWebhook()
