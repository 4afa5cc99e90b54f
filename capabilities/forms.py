"""Forms for the registry pages: they parse and label input; services validate it.

Ranges, the JSON Schema metaschema check and the URL allowlist live in
capabilities.policy and the kinds' config rules, so the API and the pages refuse exactly the same things;
a form only turns text into values and puts a service's field errors back on
the right input.
"""
from __future__ import annotations

import json
from typing import Any

from django import forms
from django.urls import reverse

from capabilities.kinds.http import config as http_config
from capabilities.models import CapabilityVersion, Kind, McpServer
from capabilities.policy import ERROR_CODES, SIDE_EFFECTS
from core import jsonlimits

LABELS_AND_HELP: dict[str, tuple[str, str]] = {
    "description": ("Description", "What the capability does, as the planner will read it."),
    "schema": ("Argument JSON Schema",
               'Draft 2020-12 JSON Schema for the arguments; must describe an object ("type": "object").'),
    "max_argument_bytes": ("Max argument size (bytes)", "Larger arguments are refused before the call."),
    "max_output_bytes": ("Max inline output (bytes)", "Larger outputs are stored by reference."),
    "timeout_s": ("Timeout (seconds)", "Per call; more than 0 and at most 3600."),
    "retry_max_attempts": ("Max attempts", "Every try counts, the first included: 1 means never retry (1–20)."),
    "retry_backoff_base_s": ("Backoff base (seconds)", "First wait before a retry; doubles each time, with jitter."),
    "retry_backoff_cap_s": ("Backoff cap (seconds)", "The longest wait between retries."),
    "retry_on": ("Retry on", "Error codes that are retried. None ticked: the default retryable codes "
                             "(timeout, connection_error, rate_limited, server_error)."),
    "side_effect": ("Side effect", "none and read change nothing; write changes our systems; external reaches "
                                   "outside (email, payments)."),
    "requires_approval": ("Requires approval", "Pause the run until an operator approves each call."),
    "idempotent": ("Idempotent", "Calling again with the same idempotency key commits nothing new."),
    "status_lookup": ("Supports status lookup", "It can tell whether a call with a given idempotency key committed."),
    "permission": ("Required permission", 'The run owner must hold it, e.g. "capabilities.create_ticket". '
                                          "Side-effecting capabilities without one are flagged."),
    "rate_limit_calls": ("Rate limit: calls", "At most this many calls per period, across all runs. "
                                              "Set both rate-limit fields or neither."),
    "rate_limit_period_s": ("Rate limit: period (seconds)", ""),
    "polling_max_attempts": ("Polling: max attempts", "Re-run while the result does not yet satisfy the run. "
                                                     "Set both polling fields or neither."),
    "polling_interval_s": ("Polling: interval (seconds)", ""),
    "polling_until": ("Polling: until", 'Optional stop condition on this capability\'s output, e.g. '
                                        '{"path": "state", "equals": "done"} (or "in": [...], "exists": true, '
                                        '"not_empty": true). Blank: poll until the run\'s completion criteria hold.'),
    "volatile_paths": ("Volatile output paths", "One dotted path per line (request_id, meta.generated_at, "
                                                "items.*.etag): values that change on every call, left out "
                                                "when comparing outcomes for repetition."),
    "settle_s": ("Settle window (seconds)", "How long after it was sent a state-changing call may still land "
                                            "(the remote still processing it). A status lookup's \"not committed\" "
                                            "is believed only after it, so nothing is sent twice. Blank: the timeout."),
    "distinct_calls": ("Identical calls are distinct", "Each step is its own operation (e.g. append a line): the "
                                                       "step id is part of the idempotency key, so a re-proposed "
                                                       "call is not deduplicated."),
}


class LinesField(forms.CharField):
    """A textarea of one value per line; cleans to a list of the non-blank lines."""

    def prepare_value(self, value):
        return "\n".join(value) if isinstance(value, (list, tuple)) else value

    def clean(self, value):
        return [line.strip() for line in (super().clean(value) or "").splitlines() if line.strip()]

# Service error keys that name a config entry map onto these form fields.
CONFIG_FIELDS = {"config.url": "url", "config.method": "method", "config.headers": "headers",
                 "config.secret_headers": "secret_headers", "config.status_url": "status_url",
                 "config.tool": "tool"}


class JSONTextField(forms.CharField):
    """A textarea holding JSON; cleans to the parsed value (or `empty` when blank)."""

    def __init__(self, *, empty: Any = None, **kw):
        self.empty = empty
        kw.setdefault("widget", forms.Textarea(attrs={"rows": 6, "spellcheck": "false"}))
        super().__init__(**kw)

    def prepare_value(self, value):
        if isinstance(value, (dict, list)):
            return json.dumps(value, indent=2)
        return value

    def clean(self, value):
        value = super().clean(value)
        if not (value or "").strip():
            return self.empty
        try:
            return jsonlimits.loads(value)
        except jsonlimits.JSONLimitError as exc:
            raise forms.ValidationError(str(exc)) from None


def _labelled(name: str, field: forms.Field) -> forms.Field:
    label, help_text = LABELS_AND_HELP[name]
    field.label, field.help_text = label, help_text
    return field


class CapabilityForm(forms.Form):
    """Create (http or mcp) or edit (any kind) a capability: every policy field."""

    name = forms.CharField(max_length=80, help_text="Lowercase letters, digits and underscores; the planner uses it.")
    kind = forms.ChoiceField(choices=[(Kind.HTTP, "HTTP webhook"), (Kind.MCP, "MCP server tool")],
                             widget=forms.RadioSelect, initial=Kind.HTTP)
    mcp_server = forms.ModelChoiceField(queryset=McpServer.objects.order_by("name"), required=False,
                                        label="MCP server", help_text="For MCP tools: the server that provides it.")
    tool = forms.CharField(required=False, label="MCP tool name", help_text="The tool's name on the server.")
    url = forms.CharField(required=False, label="URL", help_text="Must be on the outbound allowlist "
                          "(AGENTOPS_HTTP_ALLOWED_HOSTS). {idempotency_key} is replaced per call.")
    method = forms.ChoiceField(choices=[(m, m) for m in http_config.METHODS], required=False, initial="GET",
                               label="HTTP method", help_text="GET sends arguments as query parameters, "
                               "others as a JSON body.")
    headers = JSONTextField(required=False, empty={}, label="Headers",
                            help_text='Plain headers as a JSON object, e.g. {"Accept": "application/json"}. '
                                      "Never credentials.",
                            widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false"}))
    secret_headers = JSONTextField(required=False, empty={}, label="Secret headers",
                                   help_text='Header → environment variable NAME, e.g. {"Authorization": '
                                             '"TICKETS_API_TOKEN"}. The value is read at call time, never stored.',
                                   widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false"}))
    status_url = forms.CharField(required=False, label="Status URL",
                                 help_text="Optional: answers whether the call with {idempotency_key} committed.")

    description = _labelled("description", forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2})))
    schema = _labelled("schema", JSONTextField(empty={"type": "object"}, required=False,
                                               widget=forms.Textarea(attrs={"rows": 10, "spellcheck": "false"})))
    max_argument_bytes = _labelled("max_argument_bytes", forms.IntegerField())
    max_output_bytes = _labelled("max_output_bytes", forms.IntegerField())
    timeout_s = _labelled("timeout_s", forms.FloatField())
    retry_max_attempts = _labelled("retry_max_attempts", forms.IntegerField())
    settle_s = _labelled("settle_s", forms.FloatField(required=False))
    retry_backoff_base_s = _labelled("retry_backoff_base_s", forms.FloatField())
    retry_backoff_cap_s = _labelled("retry_backoff_cap_s", forms.FloatField())
    retry_on = _labelled("retry_on", forms.MultipleChoiceField(choices=[(c, c) for c in ERROR_CODES], required=False,
                                                               widget=forms.CheckboxSelectMultiple))
    side_effect = _labelled("side_effect", forms.ChoiceField(choices=[(s, s) for s in SIDE_EFFECTS]))
    requires_approval = _labelled("requires_approval", forms.BooleanField(required=False))
    idempotent = _labelled("idempotent", forms.BooleanField(required=False))
    status_lookup = _labelled("status_lookup", forms.BooleanField(required=False))
    permission = _labelled("permission", forms.CharField(required=False, max_length=150))
    rate_limit_calls = _labelled("rate_limit_calls", forms.IntegerField(required=False))
    rate_limit_period_s = _labelled("rate_limit_period_s", forms.FloatField(required=False))
    polling_max_attempts = _labelled("polling_max_attempts", forms.IntegerField(required=False))
    polling_interval_s = _labelled("polling_interval_s", forms.FloatField(required=False))
    polling_until = _labelled("polling_until", JSONTextField(required=False, empty=None,
                                                             widget=forms.Textarea(attrs={"rows": 2,
                                                                                          "spellcheck": "false"})))
    volatile_paths = _labelled("volatile_paths", LinesField(required=False, widget=forms.Textarea(
        attrs={"rows": 2, "spellcheck": "false"})))
    distinct_calls = _labelled("distinct_calls", forms.BooleanField(required=False))

    change_note = forms.CharField(required=False, max_length=300, label="Change note",
                                  help_text="Why you are changing it (kept with the version).")
    expected_version = forms.IntegerField(required=False, widget=forms.HiddenInput)

    GROUPS = (
        ("Identity", ("name", "kind", "description")),
        ("HTTP endpoint", ("url", "method", "headers", "secret_headers", "status_url")),
        ("MCP tool", ("mcp_server", "tool")),
        ("Arguments", ("schema", "max_argument_bytes", "max_output_bytes")),
        ("Side effects and approval", ("side_effect", "requires_approval", "idempotent", "distinct_calls",
                                       "status_lookup", "permission")),
        ("Timeout and retries", ("timeout_s", "settle_s", "retry_max_attempts", "retry_backoff_base_s",
                                 "retry_backoff_cap_s", "retry_on")),
        ("Rate limit and polling", ("rate_limit_calls", "rate_limit_period_s", "polling_max_attempts",
                                    "polling_interval_s", "polling_until")),
        ("Repetition", ("volatile_paths",)),
        ("Change", ("change_note",)),
    )

    def __init__(self, *args, capability=None, **kw):
        self.capability = capability
        if capability is not None and "initial" not in kw:
            kw["initial"] = self.initial_for(capability)
        elif capability is None and "initial" not in kw:
            defaults = {f: CapabilityVersion._meta.get_field(f).get_default() for f in CapabilityVersion.POLICY_FIELDS}
            defaults["schema"] = {"type": "object", "properties": {}, "additionalProperties": False}
            kw["initial"] = defaults
        super().__init__(*args, **kw)
        kind = capability.kind if capability is not None else None
        if capability is not None:
            # Identity is fixed once created; the kind decides which config fields apply.
            for name in ("name", "kind", "mcp_server"):
                del self.fields[name]
            drop = {Kind.PYTHON: ("url", "method", "headers", "secret_headers", "status_url", "tool"),
                    Kind.MCP: ("url", "method", "headers", "secret_headers", "status_url"),
                    Kind.HTTP: ("tool",)}[kind]
            for name in drop:
                del self.fields[name]
        self.fields["schema"].widget.attrs.update({
            "hx-post": reverse("capabilities:validate_schema"),
            "hx-trigger": "keyup changed delay:400ms",
            "hx-target": "#schema-errors",
            "hx-swap": "outerHTML",
            "aria-describedby": "schema-errors",
        })

    @staticmethod
    def initial_for(capability) -> dict[str, Any]:
        version = capability.current_version
        initial = version.policy()
        config = initial.pop("config") or {}
        if capability.kind == Kind.HTTP:
            initial.update({k: config.get(k) for k in ("url", "method", "headers", "secret_headers", "status_url")})
            initial["headers"] = config.get("headers") or {}
            initial["secret_headers"] = config.get("secret_headers") or {}
        elif capability.kind == Kind.MCP:
            initial["tool"] = config.get("tool", "")
        initial["expected_version"] = version.number
        return initial

    def groups(self):
        """(legend, [bound fields]) in display order, skipping fields this form does not have."""
        for legend, names in self.GROUPS:
            bound = [self[name] for name in names if name in self.fields]
            if bound:
                yield legend, bound

    def policy(self) -> dict[str, Any]:
        data = self.cleaned_data
        policy = {name: data[name] for name in LABELS_AND_HELP if name in data}
        policy["description"] = policy.get("description") or ""
        policy["permission"] = (policy.get("permission") or "").strip()
        policy["retry_on"] = list(policy.get("retry_on") or [])
        return policy

    def config(self, kind: str) -> dict[str, Any] | None:
        """The kind's config from the form, over the current config (keeps keys the form does not show)."""
        data = self.cleaned_data
        current = dict(self.capability.current_version.config) if self.capability is not None else {}
        if kind == Kind.PYTHON:
            return None
        if kind == Kind.MCP:
            return {**current, "tool": (data.get("tool") or "").strip()}
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

    def add_service_errors(self, fields: dict[str, list[str]]) -> None:
        """Put a service's field-keyed errors on the matching inputs (others at the top)."""
        for key, messages in fields.items():
            target = CONFIG_FIELDS.get(key, key)
            for message in messages if isinstance(messages, list) else [messages]:
                if target in self.fields:
                    self.add_error(target, message)
                else:
                    self.add_error(None, f"{key}: {message}" if key not in ("config", "policy") else message)


class TryForm(forms.Form):
    arguments = JSONTextField(empty={}, required=False, label="Arguments (JSON object)",
                              help_text="Checked against the capability's schema before anything runs.",
                              widget=forms.Textarea(attrs={"rows": 5, "spellcheck": "false"}))
    confirm = forms.BooleanField(required=False, label="I understand this runs for real and may change state")


class McpServerForm(forms.Form):
    name = forms.CharField(max_length=80, help_text="Lowercase letters, digits and underscores.")
    transport = forms.ChoiceField(choices=McpServer.Transport.choices, widget=forms.RadioSelect,
                                  initial=McpServer.Transport.STDIO)
    command = forms.CharField(required=False, max_length=500,
                              help_text='stdio: the program to start, e.g. "python". It runs on this server\'s '
                                        "hosts: it must be allowed by AGENTOPS_MCP_STDIO_COMMANDS and needs the "
                                        "stdio MCP permission.")
    args = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3}),
                           help_text="stdio: one argument per line.")
    env_vars = forms.CharField(required=False, label="Environment variables",
                               help_text="stdio: NAMES of variables passed to the server, comma separated. "
                                         "Values are never stored.")
    url = forms.CharField(required=False, max_length=500, label="URL",
                          help_text="streamable HTTP: the server's endpoint; must be on the outbound allowlist.")

    def service_kwargs(self) -> dict[str, Any]:
        data = self.cleaned_data
        return {
            "name": data["name"].strip(), "transport": data["transport"], "command": data["command"].strip(),
            "args": [line.strip() for line in data["args"].splitlines() if line.strip()],
            "env_vars": [v.strip() for v in data["env_vars"].split(",") if v.strip()],
            "url": data["url"].strip(),
        }

    def add_service_errors(self, fields: dict[str, list[str]]) -> None:
        for key, messages in fields.items():
            for message in messages:
                self.add_error(key if key in self.fields else None, message)


def import_choices(post, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ticked tools of the import form, each with the policy the admin confirmed.

    Inputs are named `<field>__<tool index>`; a tool is imported when `tool__<i>` is ticked.
    """
    chosen = []
    for i, tool in enumerate(tools):
        if not post.get(f"tool__{i}"):
            continue
        item = {
            "name": tool["name"],
            "capability_name": (post.get(f"capability_name__{i}") or "").strip() or tool["capability_name"],
            "side_effect": post.get(f"side_effect__{i}") or tool["side_effect"],
            "requires_approval": bool(post.get(f"requires_approval__{i}")),
            "permission": (post.get(f"permission__{i}") or "").strip(),
        }
        # The box is pre-ticked with the suggestion: only a changed box is the admin's own
        # choice, so an idempotent inferred from readOnlyHint can go with a write override.
        idempotent = bool(post.get(f"idempotent__{i}"))
        if idempotent != bool(tool["idempotent"]):
            item["idempotent"] = idempotent
        chosen.append(item)
    return chosen
