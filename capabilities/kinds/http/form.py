"""The capability form's fields for an HTTP webhook's config."""
from __future__ import annotations

from typing import Any

from django import forms

from capabilities.form_fields import JSONTextField
from capabilities.kinds.http import config as http_config

TEXT_KEYS = ("url", "status_url")


def form_fields() -> dict[str, forms.Field]:
    return {
        "url": forms.CharField(required=False, label="URL", help_text="Must be on the outbound allowlist "
                               "(AGENTOPS_HTTP_ALLOWED_HOSTS). {idempotency_key} is replaced per call."),
        "method": forms.ChoiceField(choices=[(m, m) for m in http_config.METHODS], required=False, initial="GET",
                                    label="HTTP method", help_text="GET sends arguments as query parameters, "
                                    "others as a JSON body."),
        "headers": JSONTextField(required=False, empty={}, label="Headers",
                                 help_text='Plain headers as a JSON object, e.g. {"Accept": "application/json"}. '
                                           "Never credentials.",
                                 widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false"})),
        "secret_headers": JSONTextField(required=False, empty={}, label="Secret headers",
                                        help_text='Header → environment variable NAME, e.g. {"Authorization": '
                                                  '"TICKETS_API_TOKEN"}. The value is read at call time, never '
                                                  "stored.",
                                        widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false"})),
        "status_url": forms.CharField(required=False, label="Status URL",
                                      help_text="Optional: answers whether the call with {idempotency_key} "
                                                "committed."),
    }


def initial(config: dict) -> dict[str, Any]:
    return {"url": config.get("url"), "method": config.get("method"), "status_url": config.get("status_url"),
            "headers": config.get("headers") or {}, "secret_headers": config.get("secret_headers") or {}}


def config_from(data: dict[str, Any], current: dict) -> dict:
    config = {**current, "url": (data.get("url") or "").strip(), "method": data.get("method") or "GET"}
    for key in ("headers", "secret_headers"):
        if data.get(key):
            config[key] = data[key]
        else:
            config.pop(key, None)
    if (data.get("status_url") or "").strip():
        config["status_url"] = data["status_url"].strip()
    else:
        config.pop("status_url", None)
    return config
