"""The agent and agent-token forms: typed fields that become the gateway services' arguments."""
from __future__ import annotations

from dataclasses import fields as dc_fields

from django import forms
from django.conf import settings
from django.contrib.auth import get_user_model

from gateway import selectors
from runs.web.forms import BUDGET_HELP, budget_label
from runtime.budgets import Budgets

# Per-capability limits are a mapping: the API sets them, the page keeps what is there.
_PAGE_BUDGETS = [f for f in dc_fields(Budgets) if f.name != "max_calls_per_capability"]


class AgentForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="Labels the agent's runs (agent=NAME).")
    description = forms.CharField(required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))
    owner = forms.ModelChoiceField(queryset=get_user_model().objects.none(), to_field_name="username",
                                   help_text="The agent acts with this user's permissions; its runs are theirs.")
    capabilities = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple,
                                             help_text="What tools/list shows it (enabled ones its owner may use).")
    enabled = forms.BooleanField(required=False, initial=True, help_text="A disabled agent's tokens are refused.")

    def __init__(self, *args, agent=None, **kwargs):
        if agent is not None and "initial" not in kwargs:
            kwargs["initial"] = {"name": agent.name, "description": agent.description, "owner": agent.owner,
                                 "capabilities": agent.capabilities, "enabled": agent.enabled,
                                 **{f"budget_{k}": v for k, v in agent.budgets.items()}}
        super().__init__(*args, **kwargs)
        self.agent = agent
        self.fields["owner"].queryset = get_user_model().objects.filter(is_active=True).order_by("username")
        names = selectors.capability_names()
        # A name the agent holds but the registry dropped stays visible, so saving shows why it fails.
        names += sorted(set(agent.capabilities if agent else []) - set(names))
        self.fields["capabilities"].choices = [(n, n) for n in names]
        defaults = settings.AGENTOPS_GATEWAY_DEFAULT_BUDGETS
        for field in _PAGE_BUDGETS:
            default = defaults.get(field.name, getattr(Budgets(), field.name))
            cls = forms.FloatField if isinstance(getattr(Budgets(), field.name), float) else forms.IntegerField
            # Blank takes the gateway's default, shown as the placeholder.
            self.fields[f"budget_{field.name}"] = cls(
                required=False, min_value=0, label=budget_label(field.name), help_text=BUDGET_HELP.get(field.name, ""),
                widget=forms.NumberInput(attrs={"placeholder": f"default {default:g}"}))

    def budget_fields(self):
        return [self[name] for name in self.fields if name.startswith("budget_")]

    def main_fields(self):
        return [self[name] for name in self.fields if not name.startswith("budget_")]

    def agent_arguments(self) -> dict:
        data = self.cleaned_data
        kept = {k: v for k, v in (self.agent.budgets if self.agent else {}).items() if k == "max_calls_per_capability"}
        budgets = {**kept, **{name.removeprefix("budget_"): value for name, value in data.items()
                              if name.startswith("budget_") and value is not None}}
        return {"name": data["name"], "description": data["description"], "owner": data["owner"],
                "capabilities": list(data["capabilities"]), "budgets": budgets, "enabled": data["enabled"],
                "completion": self.agent.completion if self.agent else {}}

    def add_service_errors(self, fields: dict) -> None:
        for key, message in fields.items():
            name = "budget_" + key.removeprefix("budgets.") if key.startswith("budgets.") else key
            self.add_error(name if name in self.fields else None, message)


class AgentTokenForm(forms.Form):
    name = forms.CharField(max_length=100, initial="token", help_text="Where it is used, e.g. “CI agent”.")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Built here: the limits are settings, read per request rather than at import.
        self.fields["expires_in_days"] = forms.IntegerField(
            label="Expires after (days)", min_value=1, max_value=settings.AGENTOPS_API_TOKEN_MAX_DAYS,
            initial=settings.AGENTOPS_GATEWAY_TOKEN_DEFAULT_DAYS)
