"""The rule and channel forms: typed fields that become the services' arguments."""
from __future__ import annotations

from django import forms

from notifications.models import Channel, RuleEvent
from runs.labels import LabelsField
from runtime.stop import StopKind

# Which optional fields belong to which kind of rule.
EVENT_FIELDS = {
    RuleEvent.APPROVAL_REQUESTED: (),
    RuleEvent.APPROVAL_EXPIRING: ("within_s",),
    RuleEvent.APPROVAL_UNDECIDED: ("after_minutes", "capabilities"),
    RuleEvent.RUN_STOPPED: ("stop_reasons",),
    RuleEvent.BUDGET_THRESHOLD: ("percent", "budgets"),
    RuleEvent.STALL_RATE: ("threshold", "window_s", "min_runs"),
    RuleEvent.USAGE_BURN: ("measure", "limit", "window_hours", "per", "label_key"),
    RuleEvent.FAILURE_GROUP_NEW: ("capabilities",),
    RuleEvent.MENTIONED: (),
}
_LISTS = {"stop_reasons", "budgets", "capabilities"}


class ChannelForm(forms.Form):
    name = forms.CharField(max_length=80)
    url = forms.CharField(label="Apprise URL", max_length=2000,
                          help_text="e.g. mailtos://${AGENTOPS_NOTIFY_SMTP_USER}:${AGENTOPS_NOTIFY_SMTP_PASSWORD}"
                                    "@smtp.example.com?to=ops@example.com or jsons://hooks.example.com/agentops; "
                                    "secrets as ${AGENTOPS_NOTIFY_...} from the environment")


class ChannelChoices(forms.ModelMultipleChoiceField):
    """Channels by id. An id longer than any the database holds (core.converters) names none: a list lookup with
    it overflows SQLite's integers."""

    def clean(self, value):
        too_long = next((pk for pk in value or () if len(str(pk)) > 18), None)
        if too_long is not None:
            raise forms.ValidationError(self.error_messages["invalid_choice"], code="invalid_choice",
                                        params={"value": too_long})
        return super().clean(value)


class RuleForm(forms.Form):
    name = forms.CharField(max_length=120)
    event = forms.ChoiceField(label="When", choices=RuleEvent.choices)
    channels = ChannelChoices(queryset=Channel.objects.none(), widget=forms.CheckboxSelectMultiple)
    labels = LabelsField(required=False, label="Only runs labelled", max_length=1000,
                         widget=forms.TextInput(attrs={"placeholder": "team=payments"}))
    within_s = forms.IntegerField(required=False, label="Expiring within (s)", min_value=1, initial=900)
    after_minutes = forms.IntegerField(required=False, label="Undecided after (minutes)", min_value=1, initial=30,
                                       help_text="escalation: the rule's channels (the next group) are asked then")
    capabilities = forms.CharField(required=False, label="Capabilities", max_length=1000,
                                   help_text="comma separated, e.g. create_ticket; empty: any request")
    stop_reasons = forms.CharField(required=False, label="Stop reasons", max_length=1000,
                                   help_text=f"comma separated, e.g. {StopKind.STALLED}, {StopKind.BUDGET_EXHAUSTED}; empty: any")
    percent = forms.FloatField(required=False, label="Budget used (%)", min_value=0, max_value=100, initial=80)
    budgets = forms.CharField(required=False, label="Budgets", max_length=300,
                              help_text="comma separated, e.g. tokens, cost; empty: any")
    threshold = forms.FloatField(required=False, label="Stall rate above", min_value=0, max_value=1, initial=0.2,
                                 help_text="a share of finished runs (0.2 = 20 %)")
    window_s = forms.IntegerField(required=False, label="Window (s)", min_value=60, initial=3600)
    min_runs = forms.IntegerField(required=False, label="At least this many finished runs", min_value=1, initial=5)
    measure = forms.ChoiceField(required=False, label="Usage burn: measure", initial="cost",
                                choices=[("cost", "cost"), ("tokens", "tokens")])
    limit = forms.FloatField(required=False, label="Usage burn: limit", min_value=0, initial=10,
                             help_text="tokens or cost the window may hold; passing it notifies once")
    window_hours = forms.IntegerField(required=False, label="Usage burn: window (hours)", min_value=1, max_value=720,
                                      initial=24)
    per = forms.ChoiceField(required=False, label="Usage burn: per", initial="owner",
                            choices=[("owner", "owner"), ("label", "label value")])
    label_key = forms.CharField(required=False, label="Usage burn: label key", max_length=63,
                                help_text="with per label, e.g. team: each value is summed apart")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["channels"].queryset = Channel.objects.order_by("name")

    def rule_arguments(self) -> dict:
        data = self.cleaned_data
        params = {}
        for name in EVENT_FIELDS[data["event"]]:
            value = data.get(name)
            if name in _LISTS:
                params[name] = [v.strip() for v in (value or "").split(",") if v.strip()]
            elif value not in (None, ""):
                params[name] = value
        return {"name": data["name"], "event": data["event"], "params": params, "labels": data["labels"],
                "channel_ids": [c.pk for c in data["channels"]]}

    def add_service_errors(self, fields: dict) -> None:
        for key, message in fields.items():
            name = key.removeprefix("params.")
            self.add_error(name if name in self.fields else None, message)
