"""The start-a-run form: typed fields that become run_start's arguments."""
from __future__ import annotations

import json
from dataclasses import fields as dc_fields

from django import forms

from core import jsonlimits
from runs.labels import LabelsField
from runs.models import Planner
from runs.services import budget_errors
from runtime.budgets import Budgets

_DEFAULTS = Budgets()
BUDGET_HELP = {
    "max_iterations": "Passes of the loop: each planner call and each capability execution is one.",
    "max_revisions": "Replans after the first plan.",
    "max_plan_steps": "Steps one plan may have.",
    "max_plan_depth": "Longest chain of dependencies in a plan.",
    "max_tool_calls": "Capability executions in total, retries and polls included.",
    "deadline_s": "Seconds from the start; no action runs after it.",
    "per_call_timeout_s": "Upper bound for any single capability call.",
    "max_tokens": "Planner tokens (planning and reflection).",
    "max_cost": "Planner cost in your currency unit.",
    "max_retries": "Retries across the whole run.",
    "max_side_effects_per_minute": "Committed side effects per minute.",
}


def budget_label(name: str) -> str:
    """"max_plan_steps" -> "Max. plan steps", "deadline_s" -> "Deadline (s)"."""
    unit = ""
    if name.endswith("_s"):
        name, unit = name[:-2], " (s)"
    words = name.replace("_", " ")
    words = "max. " + words[4:] if words.startswith("max ") else words
    return words[:1].upper() + words[1:] + unit


def initial_from_run(run) -> dict:
    """The start form filled in with an earlier run's settings ("start a run with the same settings")."""
    completion = run.completion if isinstance(run.completion, dict) else {}
    check = next((c for c in ("equals", "not_empty", "exists") if c in completion), "exists")
    initial = {
        "goal": run.goal, "planner": run.planner if run.planner != "direct" else "rules",
        "planner_config": json.dumps(run.planner_config, indent=1) if run.planner_config else "",
        "completion_capability": completion.get("capability", ""), "completion_path": completion.get("path", ""),
        "completion_check": check, "require_plan_approval": run.require_plan_approval,
        "completion_equals": json.dumps(completion["equals"]) if check == "equals" else "",
    }
    for name, value in (run.budgets or {}).items():
        if name != "max_calls_per_capability" and value is not None:
            initial[f"budget_{name}"] = value
    return initial


class RunStartForm(forms.Form):
    goal = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), max_length=10_000,
                           help_text="What the run should achieve, in plain words.")
    planner = forms.ChoiceField(choices=[c for c in Planner.choices if c[0] != "direct"], initial="rules")
    planner_config = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 3}), label="Planner settings (JSON)",
        help_text='scripted: {"plans": [[{"capability": ..., "arguments": {...}}]]}; '
                  'llm: {"endpoint" (a name from AGENTOPS_LLM_ENDPOINTS), "model", ...}; rules and external need none.')
    completion_capability = forms.CharField(label="Completion: capability", max_length=80,
                                            help_text="Whose latest ok output decides that the run is done.")
    completion_path = forms.CharField(label="Completion: path", required=False, max_length=200,
                                      help_text="Dotted path into that output, e.g. documents.0.id")
    completion_check = forms.ChoiceField(label="Completion: check", choices=[
        ("exists", "the path exists"), ("not_empty", "the value is not empty"), ("equals", "the value equals")])
    completion_equals = forms.CharField(label="Completion: expected value", required=False,
                                        help_text="For 'equals': JSON (\"resolved\", 3, true) or plain text.")
    require_plan_approval = forms.BooleanField(required=False, label="Require approval of the plan before it runs")
    labels = LabelsField(required=False, max_length=5000, label="Labels",
                         widget=forms.TextInput(attrs={"placeholder": "team=payments, agent=triage"}),
                         help_text="key=value pairs, separated by commas; filter the runs list and dashboard.")
    # Drawn once per form shown: a second submit of the same form (a double click, a resend after a
    # lost answer) gets the run the first one started (runs.request_keys).
    request_key = forms.CharField(required=False, max_length=255, widget=forms.HiddenInput)

    def __init__(self, *args, capabilities=(), **kwargs):
        super().__init__(*args, **kwargs)
        if capabilities:
            self.fields["completion_capability"].widget = forms.Select(choices=[(c, c) for c in capabilities])
        for field in dc_fields(Budgets):
            if field.name == "max_calls_per_capability":
                continue
            default = getattr(_DEFAULTS, field.name)
            cls = forms.FloatField if isinstance(default, float) else forms.IntegerField
            self.fields[f"budget_{field.name}"] = cls(
                label=budget_label(field.name), initial=default, min_value=0, help_text=BUDGET_HELP.get(field.name, ""))

    def budget_fields(self):
        return [self[name] for name in self.fields if name.startswith("budget_")]

    def main_fields(self):
        return [self[name] for name in self.fields if not name.startswith("budget_") and name != "request_key"]

    def clean_planner_config(self):
        raw = self.cleaned_data["planner_config"].strip()
        if not raw:
            return {}
        try:
            value = jsonlimits.loads(raw)
        except jsonlimits.JSONLimitError as exc:
            raise forms.ValidationError(str(exc)) from None
        if not isinstance(value, dict):
            raise forms.ValidationError("Planner settings must be a JSON object.")
        return value

    def clean_completion_equals(self):
        raw = self.cleaned_data["completion_equals"]
        try:
            jsonlimits.loads(raw)
        except jsonlimits.JSONTooLarge as exc:
            raise forms.ValidationError(str(exc)) from None
        except jsonlimits.JSONLimitError:
            pass  # plain text is fine here
        return raw

    def run_start_arguments(self) -> dict:
        data = self.cleaned_data
        completion = {"capability": data["completion_capability"], "path": data["completion_path"]}
        if data["completion_check"] == "equals":
            raw = data["completion_equals"]
            try:
                completion["equals"] = jsonlimits.loads(raw)
            except jsonlimits.JSONTooLarge:
                raise  # clean_completion_equals refused it already
            except jsonlimits.JSONLimitError:
                completion["equals"] = raw
        else:
            completion[data["completion_check"]] = True
        budgets = {name.removeprefix("budget_"): value for name, value in data.items()
                   if name.startswith("budget_") and value is not None}
        return {"goal": data["goal"], "planner": data["planner"], "planner_config": data["planner_config"],
                "completion": completion, "budgets": budgets,
                "require_plan_approval": data["require_plan_approval"], "labels": data.get("labels") or {}}

    def add_budget_errors_now(self) -> None:
        """Budget errors the service would report, added in the same round as the form's own errors."""
        budgets = {name.removeprefix("budget_"): value for name, value in self.cleaned_data.items()
                   if name.startswith("budget_") and value is not None}
        problems = {key: message for key, message in budget_errors(budgets).items()
                    if "budget_" + key.removeprefix("budgets.") not in self.errors}
        self.add_service_errors(problems)

    def add_service_errors(self, fields: dict) -> None:
        """Show run_start's field errors beside the fields they concern."""
        for key, message in fields.items():
            name = {"goal": "goal", "planner": "planner", "planner_config": "planner_config", "labels": "labels",
                    "completion": "completion_capability"}.get(key)
            if name is None and key.startswith("budgets."):
                name = "budget_" + key.removeprefix("budgets.")
            self.add_error(name if name in self.fields else None, message)
